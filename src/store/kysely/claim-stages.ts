import type { StageState } from '../../domain/stage-state.js';
import { prepared, preparedBySize } from './prepared-query.js';
import type { TxContext } from './tx-context.js';
import { v, valuesTable, writeRows } from './values-table.js';

/** Rows per claim statement: five bound values each. */
const CLAIMS_PER_STATEMENT = 64;
const CLAIM_TYPES = ['text', 'integer', 'text', 'integer', 'text'] as const;
/** placeStage (scheduler-verbs.ts) for many stages: each guarded on being still ready with the token read. */
const claim = preparedBySize(CLAIMS_PER_STATEMENT, (n) =>
  prepared<unknown[]>()((db, [at, ...values]) =>
    db
      .updateTable('stages')
      .from(valuesTable(values, CLAIM_TYPES, n))
      .set({ state: v(5), token: v(2), current_attempt_id: v(3), pending_reason: null, updated_at: at as number })
      .where((eb) => eb.and([eb('stages.id', '=', v(1)), eb('stages.state', '=', 'ready'), eb('stages.token', '=', v(4))]))
      .returning('id'),
  ),
);

/** One stage's claim, where a statement is not a round trip (SQLite: StoreCapabilities.setBasedWrites). */
export const claimOne = prepared<[state: StageState, token: number, attemptId: string, at: number, id: string, was: number]>()(
  (db, [state, token, attemptId, at, id, was]) =>
    db
      .updateTable('stages')
      .set({ state, token, current_attempt_id: attemptId, pending_reason: null, updated_at: at })
      .where('id', '=', id)
      .where('state', '=', 'ready')
      .where('token', '=', was),
);

/** A stage a plan places: its new token and current attempt, the token it was read with, and its
 *  state once placed (`running` where its attempt starts at placement: docs/throughput.md). */
export interface StageClaim {
  stageId: string;
  token: number;
  attemptId: string;
  was: number;
  state: 'scheduled' | 'running';
}

/**
 * The stages a plan places, each moved ready → scheduled (or running) with its new token and attempt, in one
 * guarded statement per 64 (issue 32: one round trip on PostgreSQL, not one a stage). Returns the
 * ids claimed: a stage not among them was no longer ready with the token read, and nothing of it
 * was written. Set-based where a statement is a round trip (PostgreSQL), one by one elsewhere. Each stage at most once in `claims` (a row matched twice in one statement is
 * written once, and the claims could not both be answered).
 */
export async function claimStages(tx: TxContext, claims: readonly StageClaim[]): Promise<Set<string>> {
  if (tx.setBased)
    return writeRows(
      tx,
      claim,
      claims.map((c) => [c.stageId, c.token, c.attemptId, c.was, c.state]),
      CLAIMS_PER_STATEMENT,
    );
  const ok = new Set<string>();
  for (const c of claims) if ((await claimOne.affected(tx.db, c.state, c.token, c.attemptId, tx.now, c.stageId, c.was)) === 1) ok.add(c.stageId);
  return ok;
}

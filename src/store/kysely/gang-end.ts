import { AttemptEndKind } from '../../domain/attempt-end.js';
import { activeAttemptStates, isAttemptActive } from '../../domain/attempt-state.js';
import type { CommittedOutput, OutputFile } from '../records.js';
import type { AttemptsTable } from '../schema.js';
import type { StageDefinition } from '../../domain/job-definition.js';
import { namedOutputs, uploadedOutputs, uploadsOf } from './output-verbs.js';
import { prepared } from './prepared-query.js';
import type { TxContext } from './tx-context.js';

/**
 * One attempt is the whole gang (issue 31, docs/gangs.md "Gangs in the store"): a gang's attempt is
 * a row per member, and the stage moves only on its current attempt, rank 0's. Every way a member
 * ends comes through here, so that the gang ends as one and its stage is charged once.
 */

/** What of a member these rules read: any attempt row, or a report's narrow read of one. */
export type GangMemberRow = Pick<AttemptsTable, 'id' | 'job_id' | 'stage_name' | 'number' | 'gang_id' | 'gang_rank' | 'gang_size'>;

/** The attempt whose end moves the stage: a gang's rank 0 (the stage's current attempt), else the attempt itself. */
export function stageAttemptId(a: Pick<AttemptsTable, 'id' | 'gang_id'>): string {
  return a.gang_id ?? a.id;
}

/** " rank 2 of 4" in an event's message about a gang's member; nothing for any other attempt. */
export function rankText(a: Pick<AttemptsTable, 'gang_rank' | 'gang_size'>): string {
  return a.gang_rank === null || a.gang_size === null ? '' : ` rank ${a.gang_rank} of ${a.gang_size}`;
}

/** A gang's members, by rank (the partial index attempts_gang holds gang rows only). */
const membersOf = prepared<[gangId: string]>()((db, [gangId]) =>
  db.selectFrom('attempts').select(['id', 'token', 'state', 'machine_id', 'gang_rank', 'outputs']).where('gang_id', '=', gangId).orderBy('gang_rank'),
);
const endMember = prepared<[state: 'canceled' | 'preempted', reason: string, at: number, id: string, token: number]>()((db, [state, reason, at, id, token]) =>
  db
    .updateTable('attempts')
    // A cancel's end: killed by the control plane, which its agent hears as a kill. A preemption's:
    // preempted, which its agent hears as a kill with the stage's grace to checkpoint (killList).
    .set({ state, reason, end_kind: state === 'preempted' ? AttemptEndKind.preempted : AttemptEndKind.killed, finished_at: at, lease_expires_at: null })
    .where('id', '=', id)
    .where('token', '=', token)
    .where('state', 'in', activeAttemptStates),
);

/**
 * A member ended other than by success (`what`: "failed (exit code 1)", "lost: machine m3 lost",
 * "preempted on m2 for stage …"): every other member still active is ended in the same
 * transaction with the reason "gang member rank 2 failed: ending ranks 0, 1", and its machine
 * woken, so its agent finds it on the next heartbeat's kill list. Canceled, killed at once;
 * except when the gang is preempted (`preempted` given, with the grace the stage's end gets):
 * then each member is `preempted` too, and its agent gives it the same grace to checkpoint
 * (TERM, grace, KILL) as a preempted single attempt gets (docs/gangs.md, "Preemption"). Members
 * that already succeeded keep their success. The caller then applies the stage's outcome once, for
 * `stageAttemptId(a)`. Nothing for an attempt that is not a gang's. Returns the members it ended.
 */
export async function endGang(tx: TxContext, a: GangMemberRow, what: string, preempted?: { graceMs: number }): Promise<string[]> {
  if (a.gang_id === null) return [];
  const peers = (await membersOf.rows(tx.db, a.gang_id)).filter((m) => m.id !== a.id && isAttemptActive(m.state));
  if (peers.length === 0) return [];
  const ranks = peers.map((m) => Number(m.gang_rank));
  const reason = `gang member rank ${a.gang_rank} ${what}: ending rank${ranks.length > 1 ? 's' : ''} ${ranks.join(', ')}`;
  const ended: string[] = [];
  for (const m of peers) {
    if ((await endMember.affected(tx.db, preempted ? 'preempted' : 'canceled', reason, tx.now, m.id, Number(m.token))) !== 1) continue;
    const gang = { id: a.gang_id, rank: Number(m.gang_rank), endedBy: Number(a.gang_rank) };
    const about = { jobId: a.job_id, stageName: a.stage_name, attemptId: m.id, machineId: m.machine_id };
    const member = `stage ${a.stage_name} attempt ${a.number} rank ${m.gang_rank}`;
    await tx.event(
      preempted
        ? {
            ...about,
            type: 'attempt:preempted',
            message: `${member} preempted: ${reason}; ${preempted.graceMs / 1000} s to checkpoint`,
            data: { graceMs: preempted.graceMs, end: AttemptEndKind.preempted, gang },
          }
        : { ...about, type: 'attempt:canceled', message: `${member} canceled: ${reason}`, data: { end: AttemptEndKind.killed, gang } },
    );
    await tx.publish('machine:wake', { machineId: m.machine_id });
    ended.push(m.id);
  }
  return ended;
}

const definitionOf = prepared<[stageId: string]>()((db, [stageId]) => db.selectFrom('stages').select('definition').where('id', '=', stageId));

/** Whether a gang's stage commits every rank's outputs (spec `outputs.ranks: all`); absent in its definition, rank 0's only. */
async function commitsAllRanks(tx: TxContext, stageId: string): Promise<boolean> {
  const row = await definitionOf.first(tx.db, stageId);
  return row !== undefined && (JSON.parse(row.definition) as Pick<StageDefinition, 'outputs'>).outputs?.ranks === 'all';
}

/**
 * Whether an attempt's own outputs are committed, so checked whole when it reports them: any
 * attempt but a gang's; of a gang, rank 0's, and every member's when its stage asks for all ranks.
 * Reads the stage's definition for a gang's other ranks only, so no other report pays for it.
 */
export async function commitsOwnOutputs(tx: TxContext, a: Pick<AttemptsTable, 'stage_id' | 'gang_id' | 'gang_rank'>): Promise<boolean> {
  return a.gang_id === null || Number(a.gang_rank) === 0 || (await commitsAllRanks(tx, a.stage_id));
}

/** Where rank `rank`'s file `path` is committed when a gang commits every rank's: under `rank-N/`, rank 0's too, so no two ranks' paths can meet. */
function rankPath(rank: number, path: string): string {
  return `rank-${rank}/${path}`;
}

/**
 * A member succeeded (its row already written so): whether the gang is complete, every member
 * succeeded, and then the files to commit, whichever member finished last: rank 0's at their own
 * paths, or, when the stage asks for all ranks, every member's under `rank-N/` (docs/gangs.md,
 * "Outputs"); otherwise the ranks still running, and the stage does not move yet. The members are
 * this attempt's (`gang_id`), so an earlier attempt's uploads are never among them.
 */
export async function gangSuccess(
  tx: TxContext,
  a: GangMemberRow & Pick<AttemptsTable, 'stage_id'>,
): Promise<{ complete: true; outputs: CommittedOutput[] } | { complete: false; waiting: number[] }> {
  const members = await membersOf.rows(tx.db, a.gang_id!);
  const waiting = members.filter((m) => m.state !== 'succeeded').map((m) => Number(m.gang_rank));
  if (waiting.length) return { complete: false, waiting };
  const named = (m: (typeof members)[number]) => (m.outputs ? (JSON.parse(m.outputs) as OutputFile[]) : []);
  if (!(await commitsAllRanks(tx, a.stage_id))) {
    const rank0 = members.find((m) => Number(m.gang_rank) === 0);
    const files = rank0 ? named(rank0) : [];
    // Checked whole when rank 0 reported them (completeLoaded): read again here to commit them.
    return { complete: true, outputs: files.length ? await uploadedOutputs(tx, rank0!.id, files) : [] };
  }
  // Every member's, each checked whole when it reported them: read again, in one query, to commit them.
  const naming = members.map((m) => ({ id: m.id, rank: Number(m.gang_rank), files: named(m) })).filter((m) => m.files.length);
  const uploads = naming.length
    ? await uploadsOf(
        tx.db,
        naming.map((m) => m.id),
      )
    : [];
  // Grouped by member first: a gang of 64 with thousands of files each must not scan them all per member.
  const byMember = new Map<string, typeof uploads>();
  for (const u of uploads) {
    const list = byMember.get(u.attemptId);
    if (list) list.push(u);
    else byMember.set(u.attemptId, [u]);
  }
  const outputs = naming.flatMap((m) =>
    namedOutputs(byMember.get(m.id) ?? [], m.files, `rank ${m.rank}'s `).map((f) => ({ ...f, path: rankPath(m.rank, f.path) })),
  );
  return { complete: true, outputs };
}

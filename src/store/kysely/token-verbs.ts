import { ConflictError } from '../../domain/errors.js';
import { MachineHealth } from '../../domain/machine-health.js';
import { MachineScheduling } from '../../domain/machine-scheduling.js';
import { TokenKind } from '../../domain/token-kind.js';
import type { TokenRecord } from '../records.js';
import type { TokensTable } from '../schema.js';
import { prepared } from './prepared-query.js';
import type { Db, TxContext } from './tx-context.js';

export function toToken(r: Omit<TokensTable, 'hash'>): TokenRecord {
  return {
    id: r.id,
    kind: r.kind,
    team: r.team,
    machineId: r.machine_id,
    name: r.name,
    createdAt: Number(r.created_at),
    expiresAt: r.expires_at === null ? null : Number(r.expires_at),
    revokedAt: r.revoked_at === null ? null : Number(r.revoked_at),
  };
}

const COLUMNS = ['id', 'kind', 'team', 'machine_id', 'name', 'created_at', 'expires_at', 'revoked_at'] as const;

/** A token: only its hash is stored. A team token's team is created when it is new. */
export async function tokenCreate(
  tx: TxContext,
  p: { id: string; kind: TokenKind; team: string | null; machineId?: string | null; name: string; hash: string; expiresAt: number | null },
): Promise<TokenRecord> {
  if (p.team !== null)
    await tx.db
      .insertInto('teams')
      .values({ name: p.team, weight: 1, created_at: tx.now })
      .onConflict((oc) => oc.column('name').doNothing())
      .execute();
  const row: TokensTable = {
    id: p.id,
    kind: p.kind,
    team: p.team,
    machine_id: p.machineId ?? null,
    name: p.name,
    hash: p.hash,
    created_at: tx.now,
    expires_at: p.expiresAt,
    revoked_at: null,
  };
  await tx.db.insertInto('tokens').values(row).execute();
  await tx.event({
    type: 'token:created',
    machineId: row.machine_id,
    message: `${p.kind} token ${p.id} (${p.name}) created${p.team ? ` for team ${p.team}` : ''}`,
    data: { tokenId: p.id, kind: p.kind, team: p.team },
  });
  return toToken(row);
}

const byHash = prepared<[hash: string]>()((db, [hash]) => db.selectFrom('tokens').select(COLUMNS).where('hash', '=', hash));

export async function tokenByHash(db: Db, hash: string): Promise<TokenRecord | null> {
  const r = await byHash.first(db, hash);
  return r ? toToken(r) : null;
}

export async function tokenList(db: Db, p: { includeRevoked?: boolean }): Promise<TokenRecord[]> {
  let q = db.selectFrom('tokens').select(COLUMNS).orderBy('created_at').orderBy('id');
  if (!p.includeRevoked) q = q.where('revoked_at', 'is', null);
  return (await q.execute()).map(toToken);
}

export async function tokenRevoke(tx: TxContext, p: { id: string }): Promise<{ token: TokenRecord; changed: boolean } | null> {
  const r = await tx.db.selectFrom('tokens').select(COLUMNS).where('id', '=', p.id).executeTakeFirst();
  if (!r) return null;
  if (r.revoked_at !== null) return { token: toToken(r), changed: false };
  await tx.db.updateTable('tokens').set({ revoked_at: tx.now }).where('id', '=', p.id).where('revoked_at', 'is', null).execute();
  await tx.event({
    type: 'token:revoked',
    machineId: r.machine_id,
    message: `${r.kind} token ${r.id} (${r.name}) revoked`,
    data: { tokenId: r.id, kind: r.kind, team: r.team },
  });
  return { token: toToken({ ...r, revoked_at: tx.now }), changed: true };
}

/** Tokens revoked or expired before `before`, the longest gone first, at most `limit` of them (see Store.tokensPrune). */
export async function tokensPrune(db: Db, p: { before: number; limit: number }): Promise<number> {
  const r = await db
    .deleteFrom('tokens')
    .where('id', 'in', (q) =>
      q
        .selectFrom('tokens')
        .select('id')
        .where((eb) => eb.or([eb('revoked_at', '<', p.before), eb('expires_at', '<', p.before)]))
        .orderBy((eb) => eb.fn.coalesce('revoked_at', 'expires_at'))
        .orderBy('id')
        .limit(p.limit),
    )
    .executeTakeFirst();
  return Number(r.numDeletedRows);
}

/**
 * At a registration with a join token: the machine's new credential, every earlier one of it
 * revoked (a copy left on an old disk stops working). A join token may not take the name of a
 * machine whose agent is alive: that agent speaks with its own credential, and a second holder
 * of the join token must not become it. A lost or removed machine can be taken over.
 */
export async function issueMachineCredential(
  tx: TxContext,
  p: { machineId: string; machineName: string; id: string; hash: string; revoke: boolean },
): Promise<void> {
  // A machine whose row this transaction inserted has no credential to revoke (and the update's read of the index is what concurrent joins conflicted on).
  if (p.revoke) await tx.db.updateTable('tokens').set({ revoked_at: tx.now }).where('machine_id', '=', p.machineId).where('revoked_at', 'is', null).execute();
  await tokenCreate(tx, {
    id: p.id,
    kind: TokenKind.machine,
    team: null,
    machineId: p.machineId,
    name: `machine ${p.machineName}`,
    hash: p.hash,
    expiresAt: null,
  });
}

/** Refuses a join token's registration under the name of a machine that is alive (see issueMachineCredential). */
export async function refuseLiveTakeover(tx: TxContext, name: string): Promise<void> {
  const m = await tx.db.selectFrom('machines').select(['id', 'health', 'scheduling']).where('name', '=', name).executeTakeFirst();
  if (!m || m.scheduling === MachineScheduling.removed || m.health === MachineHealth.lost) return;
  const live = await tx.db.selectFrom('tokens').select('id').where('machine_id', '=', m.id).where('revoked_at', 'is', null).executeTakeFirst();
  // A machine registered before credentials existed has none to lose: its agent joins once more.
  if (!live) return;
  throw new ConflictError(
    `machine ${name} is registered and its agent is alive (${m.health}); an agent joins under this name again with the machine's credential (its data directory), or once the machine is lost or removed`,
  );
}

import { type Kysely, type Migration, sql } from 'kysely';

/*
 * Frozen (docs/store-contract.md, "Migrations"): the scopes' spelling below is a literal, as this
 * migration shipped; it must agree with what the API writes (src/api/idempotency.ts) on the day.
 */
const TEAM_SCOPE = 'team:';
/** Matches no caller: the API writes `team:<name>` and `token:<id>` only. */
const NO_CALLER_SCOPE = 'legacy:';
/** Keys copied per statement, and job ids looked up per statement. */
const PAGE = 200;
const IDS_PER_LOOKUP = 500;

/**
 * Idempotency-Keys per caller (issue 28): a key belongs to a scope (a team token's team, an admin
 * token's id), unique per (scope, key), so a key another team used is a fresh key for this one and
 * never answers with that team's jobs.
 *
 * Keys recorded before (kept 24 h, so few and short-lived) get the team of the jobs they made when
 * every one of those jobs still exists and all are of one team: that team's token retrying across
 * the upgrade still gets its job, and it is a job that team may see anyway. A key whose jobs are of
 * several teams (an admin's batch) or gone gets a scope no caller has, so it answers nobody: the
 * worst it costs is a second job for a retry that crosses the upgrade, never another team's job.
 * (An admin token's old keys land in their jobs' team, not the token: the token was not recorded.)
 *
 * Neither SQLite nor (simply) PostgreSQL changes a primary key in place: the table is rebuilt,
 * the same way on both. PostgreSQL runs a migration in a transaction; SQLite's runs outside one
 * (kysely), so this opens its own there, and a crash half-way leaves the old table as it was.
 */
export function migration0020IdempotencyScope(dialect: 'sqlite' | 'postgres'): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect === 'sqlite') await sql`begin immediate`.execute(db);
      try {
        await rebuild(db);
        if (dialect === 'sqlite') await sql`commit`.execute(db);
      } catch (err) {
        if (dialect === 'sqlite') await sql`rollback`.execute(db);
        throw err;
      }
    },
  };
}

async function rebuild(db: Kysely<any>): Promise<void> {
  await sql`drop table if exists idempotency_keys_new`.execute(db);
  await db.schema
    .createTable('idempotency_keys_new')
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('key', 'text', (c) => c.notNull())
    .addColumn('request_hash', 'text', (c) => c.notNull())
    .addColumn('job_ids', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('idempotency_keys_pk', ['scope', 'key'])
    .execute();
  let after: string | null = null;
  for (;;) {
    let page = db.selectFrom('idempotency_keys').select(['key', 'request_hash', 'job_ids', 'created_at']).orderBy('key').limit(PAGE);
    if (after !== null) page = page.where('key', '>', after);
    const rows: { key: string; request_hash: string; job_ids: string; created_at: number }[] = await page.execute();
    if (rows.length === 0) break;
    after = rows[rows.length - 1]!.key;
    const idsOf = new Map(rows.map((r) => [r.key, jobIdsOf(r.job_ids)]));
    const teams = await teamsOf(db, [...new Set([...idsOf.values()].flat())]);
    await db
      .insertInto('idempotency_keys_new')
      .values(rows.map((r) => ({ scope: scopeOf(idsOf.get(r.key)!, teams), ...r })))
      .execute();
  }
  await sql`drop table idempotency_keys`.execute(db);
  await sql`alter table idempotency_keys_new rename to idempotency_keys`.execute(db);
  await db.schema.createIndex('idempotency_keys_created').on('idempotency_keys').columns(['created_at']).execute();
}

/** The ids a key's row names (a JSON list), or none when it is not one. */
function jobIdsOf(text: string): string[] {
  try {
    const v: unknown = JSON.parse(text);
    return Array.isArray(v) && v.every((x) => typeof x === 'string') ? v : [];
  } catch {
    return [];
  }
}

async function teamsOf(db: Kysely<any>, ids: readonly string[]): Promise<Map<string, string>> {
  const teams = new Map<string, string>();
  for (let i = 0; i < ids.length; i += IDS_PER_LOOKUP) {
    const rows: { id: string; team: string }[] = await db
      .selectFrom('jobs')
      .select(['id', 'team'])
      .where('id', 'in', ids.slice(i, i + IDS_PER_LOOKUP))
      .execute();
    for (const r of rows) teams.set(r.id, r.team);
  }
  return teams;
}

/** The one team of every job the key made, or no caller's scope. */
function scopeOf(ids: readonly string[], teams: ReadonlyMap<string, string>): string {
  const found = new Set(ids.map((id) => teams.get(id)));
  const [team] = found;
  return ids.length > 0 && found.size === 1 && team !== undefined ? `${TEAM_SCOPE}${team}` : NO_CALLER_SCOPE;
}

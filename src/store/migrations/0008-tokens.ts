import { type Kysely, type Migration, sql } from 'kysely';

/* Frozen (docs/store-contract.md, "Migrations"): the token kinds as this migration shipped (d64396e). */
const TOKEN_KINDS = ['admin', 'team', 'join', 'machine'];

function oneOf(column: string, values: readonly string[]) {
  return sql`${sql.ref(column)} in (${sql.join(values.map((v) => sql.lit(v)))})`;
}

/**
 * API tokens (docs/security.md): only a hash of each is kept, so a copy of the database lets
 * nobody in. A machine credential names its machine; a team token its team.
 */
export const migration0008Tokens: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable('tokens')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('kind', 'text', (c) => c.notNull().check(oneOf('kind', TOKEN_KINDS)))
      .addColumn('team', 'text', (c) => c.references('teams.name'))
      .addColumn('machine_id', 'text', (c) => c.references('machines.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('hash', 'text', (c) => c.notNull().unique())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addColumn('expires_at', 'bigint')
      .addColumn('revoked_at', 'bigint')
      .execute();
    await sql`create index tokens_machine on tokens (machine_id) where machine_id is not null`.execute(db);
  },
};

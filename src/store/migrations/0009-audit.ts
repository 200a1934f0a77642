import type { Kysely, Migration } from 'kysely';

/**
 * Every change a person asked for (docs/security.md): who, what, when, and how it went. A change's
 * row is written in the change's own transaction; a refused request's on its own.
 */
export function migration0009Audit(dialect: 'sqlite' | 'postgres'): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema
        .createTable('audit')
        .addColumn('seq', dialect === 'postgres' ? 'bigserial' : 'integer', (c) => (dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn('at', 'bigint', (c) => c.notNull())
        .addColumn('token_id', 'text')
        .addColumn('actor', 'text', (c) => c.notNull())
        .addColumn('action', 'text', (c) => c.notNull())
        .addColumn('target', 'text')
        .addColumn('result', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('audit_at').on('audit').columns(['at']).execute();
    },
  };
}

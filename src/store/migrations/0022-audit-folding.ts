import type { Kysely, Migration } from 'kysely';

/**
 * Repeated refusals folded into one audit row (issue 28: 600 × 403 in half a second wrote 606
 * rows): the same refusal (same token, action, target and result) within a window adds one to its
 * row's `count` and sets its `last_at`, found by its `fold_key` (a hash of what makes it the same;
 * null for changes that were made, which are never folded). Rows written before: seen once.
 */
export const migration0022AuditFolding: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .alterTable('audit')
      .addColumn('count', 'integer', (c) => c.notNull().defaultTo(1))
      .execute();
    await db.schema.alterTable('audit').addColumn('last_at', 'bigint').execute();
    await db.schema.alterTable('audit').addColumn('fold_key', 'text').execute();
    await db.schema.createIndex('audit_fold').on('audit').columns(['fold_key', 'at']).execute();
  },
};

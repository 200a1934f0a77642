/**
 * What differs between database adapters, as read-only flags the shared store code consults,
 * instead of `if (postgres)` scattered through it.
 */
export interface StoreCapabilities {
  readonly dialect: 'sqlite' | 'postgres';
  /** `SELECT … FOR UPDATE SKIP LOCKED` is available (PostgreSQL); SQLite serialises writers instead. */
  readonly skipLocked: boolean;
  /** One connection writes at a time (SQLite): store calls that wait for it share the next
   *  transaction and its commit (group commit, src/store/kysely/group-commit.ts). */
  readonly singleWriter: boolean;
}

/**
 * What differs between database adapters, as read-only flags the shared store code consults,
 * instead of `if (postgres)` scattered through it.
 */
export interface StoreCapabilities {
  readonly dialect: 'sqlite' | 'postgres';
  /** `SELECT … FOR UPDATE SKIP LOCKED` is available (PostgreSQL); SQLite serialises writers instead. */
  readonly skipLocked: boolean;
}

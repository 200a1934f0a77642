import { Type, type Static } from 'typebox';

/** One row of the audit log (docs/security.md): who asked for what, when, and how it went. */
export const AuditView = Type.Object({
  seq: Type.Integer(),
  at: Type.String({ format: 'date-time' }),
  tokenId: Type.Union([Type.String(), Type.Null()]),
  actor: Type.String(),
  action: Type.String(),
  target: Type.Union([Type.String(), Type.Null()]),
  result: Type.String(),
  /** How many times: the same refusal repeated within a minute is one row (its first time `at`, its last `lastAt`). */
  count: Type.Integer({ minimum: 1 }),
  lastAt: Type.String({ format: 'date-time' }),
});
export type AuditView = Static<typeof AuditView>;

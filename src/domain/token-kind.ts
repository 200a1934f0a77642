/**
 * What an API token lets its holder do (docs/security.md). Tokens are made by an admin (`gantry
 * token create`), except the first admin token (made by the server at its first start) and machine
 * credentials (made when an agent registers with a join token).
 */
export const TokenKind = {
  /** Everything: every team's jobs, the machines, tokens, the audit log. */
  admin: 'admin',
  /** One team's jobs (submit, see, cancel, logs, events) and a read of the cluster; another team's job is not found. */
  team: 'team',
  /** Registers a machine (an agent joining), and nothing else; the agent then speaks with the machine's own credential. */
  join: 'join',
  /** One machine's agent: heartbeats, reports, logs and outputs of that machine's attempts only. Revoked when the machine registers again with a join token. */
  machine: 'machine',
} as const;
export type TokenKind = (typeof TokenKind)[keyof typeof TokenKind];
export const tokenKinds = Object.values(TokenKind);

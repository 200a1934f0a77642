import { chmodSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { newTokenId, newTokenSecret, tokenHash } from '../api/auth/token-secret.js';
import type { TokenKind } from '../domain/token-kind.js';
import type { Store } from '../store/store.js';

/** The admin token the server makes at its first start, where the CLI looks for it (docs/security.md). */
export const adminTokenFile = (dataDir: string) => join(dataDir, 'admin.token');
/** The join token `gantry up` gives its local agents. */
export const joinTokenFile = (dataDir: string) => join(dataDir, 'join.token');

/**
 * The token in `file`, made (and the file written, readable by its owner only) when there is none
 * or the one there is no longer valid (revoked, expired, or from another database). Whoever can
 * read the data directory can read the database too: a token there adds no way in.
 */
export async function ensureTokenFile(store: Store, file: string, kind: TokenKind, name: string, now: number): Promise<{ token: string; created: boolean }> {
  if (existsSync(file)) {
    const token = readFileSync(file, 'utf8').trim();
    const rec = token ? await store.tokenByHash({ hash: tokenHash(token) }) : null;
    if (rec && rec.kind === kind && rec.revokedAt === null && (rec.expiresAt === null || rec.expiresAt > now)) return { token, created: false };
  }
  const token = newTokenSecret(kind);
  await store.tokenCreate({ id: newTokenId(now), kind, team: null, name, hash: tokenHash(token), expiresAt: null, now });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, token + '\n', { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
  return { token, created: true };
}

import { newTokenId, newTokenSecret, tokenHash } from '../../src/api/auth/token-secret.js';
import type { TokenKind } from '../../src/domain/token-kind.js';
import type { MachineRecord, MachineRegistration } from '../../src/store/records.js';
import type { Store } from '../../src/store/store.js';

/** A token made straight in the store, for tests that drive a control plane in process. */
export async function makeToken(store: Store, kind: TokenKind, opts: { team?: string; name?: string; now?: number } = {}): Promise<string> {
  const token = newTokenSecret(kind);
  const now = opts.now ?? Date.now();
  await store.tokenCreate({
    id: newTokenId(now),
    kind,
    team: opts.team ?? null,
    name: opts.name ?? `test ${kind}`,
    hash: tokenHash(token),
    expiresAt: null,
    now,
  });
  return token;
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** A machine registered as a joining agent would be: with a credential of its own, returned. */
export async function registerMachine(store: Store, reg: MachineRegistration, now = Date.now()): Promise<MachineRecord & { credential: string }> {
  const credential = newTokenSecret('machine');
  const m = await store.machineRegister({ ...reg, now, credential: { id: newTokenId(now), hash: tokenHash(credential) } });
  return { ...m, credential };
}

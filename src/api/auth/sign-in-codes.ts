import * as crypto from 'node:crypto';
import { tokenHash } from './token-secret.js';

/** How long a sign-in code may be exchanged: long enough to open the link, not a credential to keep. */
export const SIGN_IN_CODE_MS = 15 * 60_000;
/** How long the dashboard's session, the token a code is exchanged for, lasts. */
export const SIGN_IN_SESSION_MS = 12 * 3_600_000;
/** Codes outstanding at once: `gantry up` makes one a start; a bound keeps a loop that makes them from growing memory. */
const MAX_OUTSTANDING = 100;

/**
 * One-time sign-in codes (issue 28: `gantry up` printed a never-expiring admin token in its
 * sign-in link). A code is single-purpose and short-lived: it is not a token (no route but the
 * exchange takes it), it can be exchanged once (`POST /v1/sign-in`) for the dashboard's session,
 * and not after SIGN_IN_CODE_MS. Kept in this server's memory by hash: a restart forgets them
 * (the link printed by that start goes with it).
 */
export class SignInCodes {
  private readonly byHash = new Map<string, { until: number }>();

  constructor(
    private readonly now: () => number,
    private readonly ttlMs = SIGN_IN_CODE_MS,
  ) {}

  /** A new code, to put in a link: `gantry_signin_` and 43 characters of base64url (256 random bits). */
  issue(): string {
    this.forgetExpired();
    if (this.byHash.size >= MAX_OUTSTANDING) this.byHash.delete(this.byHash.keys().next().value!);
    const code = `gantry_signin_${crypto.randomBytes(32).toString('base64url')}`;
    this.byHash.set(tokenHash(code), { until: this.now() + this.ttlMs });
    return code;
  }

  /** Takes the code if it is valid now: true once; false for an unknown, used or expired one (all forgotten). */
  take(code: string): boolean {
    const hash = tokenHash(code);
    const c = this.byHash.get(hash);
    this.byHash.delete(hash);
    return c !== undefined && c.until > this.now();
  }

  private forgetExpired(): void {
    const now = this.now();
    for (const [hash, c] of this.byHash) if (c.until <= now) this.byHash.delete(hash);
  }
}

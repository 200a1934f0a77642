import * as crypto from 'node:crypto';
import { newId } from '../../domain/ids.js';
import type { TokenKind } from '../../domain/token-kind.js';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz'; // Crockford base32, lower case

/**
 * A new token: `gantry_<kind>_` and 32 characters of base32, 160 random bits. The prefix makes a
 * leaked token recognisable (by a person, by a secret scanner) and says what it can do.
 */
export function newTokenSecret(kind: TokenKind): string {
  const bytes = crypto.randomBytes(20);
  let bits = 0;
  let value = 0;
  let out = '';
  for (const b of bytes) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  return `gantry_${kind}_${out}`;
}

/** What the store keeps of a token. A plain sha256 suffices: the token is 160 random bits, not a password. */
export function tokenHash(token: string): string {
  return oneShot ? oneShot('sha256', token, 'hex') : crypto.createHash('sha256').update(token, 'utf8').digest('hex');
}

/**
 * `crypto.hash` (Node 20.12 on): one call, no Hash stream object. Every request hashes its token;
 * the server's CPU profile put 60–100 µs of a request in the Hash object's constructor (a sampled
 * figure, inside a busy process: in a tight loop here the two cost 2.8 and 0.5 µs). Older Node 20
 * releases have only createHash.
 */
const oneShot = (crypto as { hash?: (algorithm: string, data: string, encoding: 'hex') => string }).hash;

export function newTokenId(now: number): string {
  return newId('tok', now);
}

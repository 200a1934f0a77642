import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz'; // Crockford base32, lower case

/**
 * Sortable ids: 10 characters of millisecond time then 10 of randomness (a ULID in lower case),
 * with a prefix naming the kind of thing ("job_", "att_", "m_"), so ids in logs say what they are.
 */
export function newId(prefix: string, nowMs: number): string {
  let t = nowMs;
  let time = '';
  for (let i = 0; i < 10; i++) {
    time = ALPHABET[t % 32] + time;
    t = Math.floor(t / 32);
  }
  const bytes = randomBytes(10);
  let rand = '';
  for (const b of bytes) rand += ALPHABET[b % 32];
  return `${prefix}_${time}${rand}`;
}

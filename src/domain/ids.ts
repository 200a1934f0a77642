import { randomFillSync } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz'; // Crockford base32, lower case

// Random bytes drawn a page at a time: one system call per id cost more than the rest of a batch
// submit's row building (four ids a job).
const pool = Buffer.alloc(4000);
let used = pool.length;
function random10(): Buffer {
  if (used + 10 > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  used += 10;
  return pool.subarray(used - 10, used);
}

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
  const bytes = random10();
  let rand = '';
  for (const b of bytes) rand += ALPHABET[b % 32];
  return `${prefix}_${time}${rand}`;
}

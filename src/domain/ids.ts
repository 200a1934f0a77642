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

/** Per prefix: the last id's time and random digits, so that ids made in one millisecond ascend. */
const last = new Map<string, { time: number; digits: number[] }>();

/**
 * Sortable ids: 10 characters of millisecond time then 10 of randomness (a ULID in lower case),
 * with a prefix naming the kind of thing ("job_", "att_", "m_"), so ids in logs say what they are.
 * Monotonic within a process, as ULID's monotonic mode: an id made in the same millisecond as the
 * previous one of its kind is that one plus one, so the jobs of one batch sort in their order.
 */
export function newId(prefix: string, nowMs: number): string {
  let t = nowMs;
  let time = '';
  for (let i = 0; i < 10; i++) {
    time = ALPHABET[t % 32] + time;
    t = Math.floor(t / 32);
  }
  const prev = last.get(prefix);
  let digits: number[];
  if (prev && prev.time === nowMs && !prev.digits.every((d) => d === 31)) {
    digits = [...prev.digits];
    for (let i = digits.length - 1; i >= 0; i--) {
      if (digits[i]! < 31) {
        digits[i]! += 1;
        break;
      }
      digits[i] = 0;
    }
  } else {
    // Leave headroom below the top so the increments of one millisecond never overflow.
    digits = [...random10()].map((b, i) => (i === 0 ? b % 16 : b % 32));
  }
  last.set(prefix, { time: nowMs, digits });
  return `${prefix}_${time}${digits.map((d) => ALPHABET[d]).join('')}`;
}

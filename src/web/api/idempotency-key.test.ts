import { describe, expect, it } from 'vitest';
import { newIdempotencyKey } from './idempotency-key';

describe('newIdempotencyKey', () => {
  it('is 32 hex digits, within what the server takes (1 to 200 printable characters, no spaces)', () => {
    expect(newIdempotencyKey()).toMatch(/^[0-9a-f]{32}$/);
    expect(newIdempotencyKey(() => Uint8Array.from([0, 1, 15, 16, 255, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]))).toBe('00010f10ff0000000000000000000000');
  });
  it('differs each time', () => {
    expect(new Set(Array.from({ length: 100 }, () => newIdempotencyKey())).size).toBe(100);
  });
});

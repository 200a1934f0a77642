import { describe, expect, it } from 'vitest';
import { retryAfterMs, retryAfterWaitMs } from '../lib/retry-after.js';
import { HeartbeatBudget, shedAnswer } from './heartbeat-shedding.js';

describe('the heartbeat budget', () => {
  it('is past only beyond 1.5 times its rate over the last period, whatever the waves within it', () => {
    const b = new HeartbeatBudget(100);
    // 400 a period of 4 s (100 a second), in waves: 350 in its first second, 50 over the rest.
    for (let p = 0; p < 5; p++) {
      for (let i = 0; i < 350; i++) expect(b.arrive(p * 4000 + i, 4000)).toBe(false);
      for (let i = 0; i < 50; i++) expect(b.arrive(p * 4000 + 1000 + i * 50, 4000)).toBe(false);
    }
    // Twice that within the next period: past it once the last period holds more than 600.
    const past = Array.from({ length: 800 }, (_, i) => b.arrive(20_000 + i * 5, 4000));
    expect(past.indexOf(true)).toBeGreaterThan(0);
    expect(past.slice(past.indexOf(true)).every(Boolean)).toBe(true);
    // Quiet for two periods: the past is forgotten.
    expect(b.arrive(32_000, 4000)).toBe(false);
  });

  it('is never past with no budget (0: the period never grows, nothing is shed)', () => {
    const b = new HeartbeatBudget(0);
    for (let i = 0; i < 10_000; i++) expect(b.arrive(1000, 2000)).toBe(false);
  });

  it('a shed answer asks for whole seconds, at least the period, and records the longest wait the jitter allows', () => {
    expect(shedAnswer(2000)).toEqual({ retryAfterSeconds: 2, recordedPeriodMs: 2500 });
    expect(shedAnswer(4100)).toEqual({ retryAfterSeconds: 5, recordedPeriodMs: 6250 });
    expect(shedAnswer(300)).toEqual({ retryAfterSeconds: 1, recordedPeriodMs: 1250 });
    for (const u of [0, 0.5, 0.999]) {
      const w = retryAfterWaitMs(4000, u);
      expect(w).toBeGreaterThanOrEqual(4000);
      expect(w).toBeLessThanOrEqual(shedAnswer(4000).recordedPeriodMs);
    }
  });

  it('reads Retry-After as seconds or a date, capped, and nothing else', () => {
    const now = Date.parse('2026-12-06T10:00:00Z');
    expect(retryAfterMs('3', now, 30_000)).toBe(3000);
    expect(retryAfterMs(new Date(now + 5000).toUTCString(), now, 30_000)).toBe(5000);
    expect(retryAfterMs('3600', now, 30_000)).toBe(30_000);
    expect(retryAfterMs('soon', now, 30_000)).toBeNull();
    expect(retryAfterMs(undefined, now, 30_000)).toBeNull();
  });
});

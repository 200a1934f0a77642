import { describe, expect, it } from 'vitest';
import { retryAfterMs, retryAfterWaitMs } from '../lib/retry-after.js';
import { HeartbeatBudget, shedAnswer } from './heartbeat-shedding.js';

describe('the heartbeat budget', () => {
  it('is past only beyond 1.25 times its rate over the last second', () => {
    const b = new HeartbeatBudget(100);
    // 100 a second, evenly: never past it.
    for (let t = 0; t < 5000; t += 10) expect(b.arrive(t)).toBe(false);
    // 200 within the next second: past it once the last second holds more than 125.
    const past = Array.from({ length: 200 }, (_, i) => b.arrive(5000 + i * 5));
    expect(past.indexOf(true)).toBeGreaterThan(0);
    expect(past.slice(past.indexOf(true)).every(Boolean)).toBe(true);
    // Quiet for two seconds: the past is forgotten.
    expect(b.arrive(8000)).toBe(false);
  });

  it('is never past with no budget (0: the period never grows, nothing is shed)', () => {
    const b = new HeartbeatBudget(0);
    for (let i = 0; i < 10_000; i++) expect(b.arrive(1000)).toBe(false);
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

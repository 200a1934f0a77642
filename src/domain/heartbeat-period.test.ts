import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { fleetHeartbeatMs, MAX_HEARTBEAT_PERIOD_MS, silenceAllowances } from './heartbeat-period.js';

const t = { heartbeatMs: 2000, suspectAfterMs: 5000, lostAfterMs: 10_000, leaseMs: 10_000, maxHeartbeatsPerSecond: 2500 };

describe('fleetHeartbeatMs', () => {
  it('is the configured period up to heartbeatMs × rate machines, then machines / rate in tenths of a second, at most 30 s', () => {
    expect(fleetHeartbeatMs(0, t)).toBe(2000);
    expect(fleetHeartbeatMs(5000, t)).toBe(2000);
    expect(fleetHeartbeatMs(5001, t)).toBe(2100);
    expect(fleetHeartbeatMs(10_000, t)).toBe(4000);
    expect(fleetHeartbeatMs(1_000_000, t)).toBe(MAX_HEARTBEAT_PERIOD_MS);
  });

  it('never grows with a rate of 0', () => {
    expect(fleetHeartbeatMs(1_000_000, { ...t, maxHeartbeatsPerSecond: 0 })).toBe(2000);
  });

  it('the fleet sends at most the rate (or what the configured period sends) while the period is under its cap', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 200_000 }), fc.integer({ min: 1, max: 10_000 }), (machines, rate) => {
        const p = fleetHeartbeatMs(machines, { heartbeatMs: 2000, maxHeartbeatsPerSecond: rate });
        expect(p).toBeGreaterThanOrEqual(2000);
        expect(p).toBeLessThanOrEqual(MAX_HEARTBEAT_PERIOD_MS);
        if (p < MAX_HEARTBEAT_PERIOD_MS) expect((machines * 1000) / p).toBeLessThanOrEqual(Math.max(rate, (machines * 1000) / 2000));
      }),
    );
  });
});

describe('silenceAllowances', () => {
  it('the configured ones at the configured period (or none recorded), grown by two periods’ growth past it', () => {
    expect(silenceAllowances(null, t)).toEqual({ suspectAfterMs: 5000, lostAfterMs: 10_000, leaseMs: 10_000 });
    expect(silenceAllowances(2000, t)).toEqual({ suspectAfterMs: 5000, lostAfterMs: 10_000, leaseMs: 10_000 });
    expect(silenceAllowances(4000, t)).toEqual({ suspectAfterMs: 9000, lostAfterMs: 14_000, leaseMs: 14_000 });
    // A row from a server configured with a longer period than this one's: never less than the configured allowances.
    expect(silenceAllowances(1000, t)).toEqual({ suspectAfterMs: 5000, lostAfterMs: 10_000, leaseMs: 10_000 });
  });

  it('keeps the configured margins over a live row’s worst age (two periods) at every period', () => {
    fc.assert(
      fc.property(fc.integer({ min: 2000, max: MAX_HEARTBEAT_PERIOD_MS }), (p) => {
        const a = silenceAllowances(p, t);
        // 5 s − 2 × 2 s = 1 s over a live row's worst age, whatever the period.
        expect(a.suspectAfterMs - 2 * p).toBe(t.suspectAfterMs - 2 * t.heartbeatMs);
        expect(a.leaseMs - 2 * p).toBe(t.leaseMs - 2 * t.heartbeatMs);
      }),
    );
  });
});

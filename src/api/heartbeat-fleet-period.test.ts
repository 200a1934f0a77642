import { describe, expect, it } from 'vitest';
import { HeartbeatFleetPeriod } from './heartbeat-fleet-period.js';

const t = { heartbeatMs: 2000, suspectAfterMs: 5000, lostAfterMs: 10_000, leaseMs: 10_000, maxHeartbeatsPerSecond: 2500 };

describe('HeartbeatFleetPeriod', () => {
  it('gives the configured period until the fleet is counted, then the fleet’s; heartbeats’ leases last for it', () => {
    const p = new HeartbeatFleetPeriod(t);
    expect(p.current).toBe(2000);
    expect(p.heartbeatLeaseMs).toBe(10_000);
    p.set(10_000, 0);
    expect(p.fleet).toBe(10_000);
    expect(p.current).toBe(4000);
    expect(p.heartbeatLeaseMs).toBe(14_000);
  });

  it('a start’s lease lasts for the longest period given lately: agents told it may not have heard a shorter one yet', () => {
    const p = new HeartbeatFleetPeriod(t);
    p.set(20_000, 0);
    expect(p.startLeaseMs).toBe(10_000 + 2 * (8000 - 2000));
    // The fleet halves: heartbeats give 4 s at once, a start still allows for 8 s ...
    p.set(10_000, 1000);
    expect(p.current).toBe(4000);
    expect(p.heartbeatLeaseMs).toBe(14_000);
    expect(p.startLeaseMs).toBe(22_000);
    p.set(10_000, 16_000);
    expect(p.startLeaseMs).toBe(22_000);
    // ... until every agent told 8 s has heard again (twice that after it was last given).
    p.set(10_000, 16_001);
    expect(p.startLeaseMs).toBe(14_000);
  });
});

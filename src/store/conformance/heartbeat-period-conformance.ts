import { beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../store.js';
import { cpuMachine } from './fixtures.js';

/**
 * A heartbeat period that grows with the fleet (docs/failure-detection.md), as every adapter must
 * keep it: each row records the period its last heartbeat was told, written by the heartbeat or by
 * machinesSeen; the reaper judges each machine by its own; the fleet is counted. Run inside
 * storeConformance, whose hooks open a fresh store (`storeOf`) for each test and close it.
 */
export function heartbeatPeriodConformance(storeOf: () => Store): void {
  describe('heartbeat period grown with the fleet', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    const HB = 2000;
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });
    const health = async (id: string) => (await store.machineGet({ machineId: id }))!.health;
    const periodOf = async (id: string) => (await store.machineGet({ machineId: id }))!.heartbeatMs;

    it('rows record the period each heartbeat was told; the reaper grows each machine’s allowances by two periods’ growth', async () => {
      const [long, short, unset] = [
        await store.machineRegister({ ...cpuMachine('long'), now }),
        await store.machineRegister({ ...cpuMachine('short'), now }),
        await store.machineRegister({ ...cpuMachine('unset'), now }),
      ];
      expect(await periodOf(long.id)).toBeNull();
      // Written by the heartbeat itself (its row too old for the liveness kept in memory), with its period.
      await store.machineHeartbeat({
        machineId: long.id,
        running: [],
        now: now + 4000,
        leaseMs: LEASE,
        missingAfterMs: 4000,
        jitter: 0,
        livenessAfterMs: 3000,
        period: { heartbeatMs: HB, periodMs: 4000 },
      });
      expect(await periodOf(long.id)).toBe(4000);
      // Written together, each with its own; null where none was given (the configured period).
      await store.machinesSeen({
        seen: [
          { machineId: short.id, at: now + 4000, periodMs: 2000 },
          { machineId: unset.id, at: now + 4000 },
        ],
        now: now + 4100,
      });
      expect(await periodOf(short.id)).toBe(2000);
      expect(await periodOf(unset.id)).toBeNull();
      // Silent 6 s: past 5 s for those on 2 s, within the 9 s a 4 s period allows.
      const reap = (at: number) => store.machinesReap({ now: at, suspectAfterMs: 5000, lostAfterMs: 10_000, jitter: 0, heartbeatMs: HB });
      await reap(now + 10_000);
      expect([await health(long.id), await health(short.id), await health(unset.id)]).toEqual(['ready', 'suspect', 'suspect']);
      await reap(now + 14_000);
      expect([await health(long.id), await health(short.id)]).toEqual(['suspect', 'lost']);
      await reap(now + 17_999);
      expect(await health(long.id)).toBe('suspect');
      await reap(now + 18_000);
      expect(await health(long.id)).toBe('lost');
    });

    it('within its period’s allowance a heartbeat leaves the row to the liveness kept in memory; past it, writes it', async () => {
      const m = await store.machineRegister({ ...cpuMachine('m'), now });
      await store.machinesSeen({ seen: [{ machineId: m.id, at: now + 100, periodMs: 4000 }], now: now + 200 });
      const idle = (at: number) =>
        store.machineHeartbeat({
          machineId: m.id,
          running: [],
          now: at,
          leaseMs: LEASE,
          missingAfterMs: 4000,
          jitter: 0,
          livenessAfterMs: 1.5 * HB,
          period: { heartbeatMs: HB, periodMs: 4000 },
        });
      // 1.5 periods of 2 s, grown by 2 × 2 s: 7 s.
      await idle(now + 100 + 6999);
      expect((await store.machineGet({ machineId: m.id }))!.lastHeartbeatAt).toBe(now + 100);
      await idle(now + 100 + 7000);
      expect((await store.machineGet({ machineId: m.id }))!.lastHeartbeatAt).toBe(now + 7100);
    });

    it('counts the machines expected to heartbeat: not removed, and not lost or lost within the last minute', async () => {
      const ms = [];
      for (const n of ['a', 'b', 'c']) ms.push(await store.machineRegister({ ...cpuMachine(n), now }));
      expect(await store.machinesHeartbeating({ now })).toBe(3);
      await store.machinesReap({ now: now + 20_000, suspectAfterMs: 5000, lostAfterMs: 10_000, jitter: 0 });
      // Lost a moment ago: alive, if the control plane was what fell behind, and heartbeating on the
      // period it was told; counted, so that the period a wave of losses gives does not shrink.
      expect(await store.machinesHeartbeating({ now: now + 20_000 })).toBe(3);
      expect(await store.machinesHeartbeating({ now: now + 20_000 + 60_000 })).toBe(3);
      expect(await store.machinesHeartbeating({ now: now + 20_000 + 60_001 })).toBe(0);
      await store.machineHeartbeat({ machineId: ms[0]!.id, running: [], now: now + 80_100, leaseMs: LEASE, missingAfterMs: 4000, jitter: 0 });
      expect(await store.machinesHeartbeating({ now: now + 80_100 })).toBe(1);
    });
  });
}

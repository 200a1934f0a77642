/**
 * Heartbeats kept in memory (src/api/heartbeat-liveness.ts) against the bound of
 * docs/failure-detection.md, on a fake clock: idle agents heartbeat at their period, the liveness
 * loop writes what they said at its slowest (every 0.48 of a period, the top of its jitter), the
 * lost-machines loop judges at its slowest (1.2 × its interval), each at several phases against
 * the others. A live machine is never suspect; a machine that dies is lost within
 * [lostAfterMs − 1.5 × heartbeatMs, lostAfterMs + 1.2 × lostMachinesIntervalMs]; a replica that
 * never saw the heartbeats judges from the rows the other wrote, and does not mark it lost.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { type FakeAgent, ProtocolHarness } from '../support/protocol-harness.js';

/** The round trip of an idle heartbeat held its whole period: the next arrives this much after a period. */
const RTT = 40;

interface Sim {
  h: ProtocolHarness;
  /** Runs the loops' passes: the replica that holds the agents' heartbeats flushes, the judging one reaps. */
  flusher: ControlPlane;
  judge: ControlPlane;
  agents: { agent: FakeAgent; next: number; stopAt?: number }[];
  flushPhase: number;
  reapPhase: number;
}

/**
 * Runs every event in time order until `until`; answers, per machine, each health the judge saw
 * after each of its passes changed something, and when.
 */
async function run(s: Sim, until: number): Promise<Map<string, { health: string; at: number }[]>> {
  const { h, flusher, judge } = s;
  const hb = h.config.heartbeatMs;
  const flushEvery = 0.48 * hb;
  const reapEvery = 1.2 * h.config.lostMachinesIntervalMs;
  let nextFlush = h.clock.t + s.flushPhase;
  let nextReap = h.clock.t + s.reapPhase;
  const seen = new Map<string, { health: string; at: number }[]>();
  for (;;) {
    const live = s.agents.filter((a) => a.stopAt === undefined || a.next < a.stopAt);
    const t = Math.min(nextFlush, nextReap, ...live.map((a) => a.next));
    if (t > until) return seen;
    h.clock.t = t;
    for (const a of live) {
      if (a.next !== t) continue;
      await a.agent.heartbeat();
      a.next = t + hb + RTT;
    }
    if (nextFlush === t) {
      await flusher.loops.liveness.runOnce();
      nextFlush = t + flushEvery;
    }
    if (nextReap === t) {
      await judge.loops.reconciler.lostMachines.runOnce();
      nextReap = t + reapEvery;
      for (const m of await judge.store.machineList()) {
        const list = seen.get(m.id) ?? [];
        if (list.at(-1)?.health !== m.health) list.push({ health: m.health, at: t });
        seen.set(m.id, list);
      }
    }
  }
}

describe('heartbeats kept in memory, on a fake clock', () => {
  let h: ProtocolHarness | undefined;
  let other: { cp: ControlPlane; dir: string } | undefined;
  afterEach(async () => {
    if (other) {
      // It shares the harness's store: its API and bus only (the harness closes the store).
      await other.cp.app.close();
      await other.cp.bus.close();
      rmSync(other.dir, { recursive: true, force: true });
      other = undefined;
    }
    await h?.close();
    h = undefined;
  });

  it('an idle heartbeat writes nothing itself: the liveness loop writes its arrival time', async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');
    const at = async () => (await h!.cp.store.machineGet({ machineId: m.machineId }))!.lastHeartbeatAt;
    const registered = await at();
    h.advance(h.config.heartbeatMs + RTT);
    const arrived = h.clock.t;
    await m.heartbeat();
    expect(await at()).toBe(registered);
    h.advance(100);
    await h.cp.loops.liveness.runOnce();
    expect(await at()).toBe(arrived);
  });

  for (const [flushPhase, reapPhase] of [
    [0, 0],
    [10, 500],
    [470, 1190],
    [955, 30],
    [600, 700],
  ] as const) {
    it(`a live idle machine is never suspect; a dead one is lost within the documented bound (loops at phases ${flushPhase} / ${reapPhase} ms)`, async () => {
      h = await ProtocolHarness.create();
      const { heartbeatMs, lostAfterMs, lostMachinesIntervalMs } = h.config;
      const alive = await h.agent('alive');
      const dies = await h.agent('dies');
      // Past the control plane's start-up grace (it judges nothing for a loss period).
      h.advance(lostAfterMs + 1);
      await alive.heartbeat();
      await dies.heartbeat();
      const start = h.clock.t;
      const deathAt = start + 20_000 + flushPhase;
      const seen = await run(
        {
          h,
          flusher: h.cp,
          judge: h.cp,
          agents: [
            { agent: alive, next: start + heartbeatMs + RTT },
            { agent: dies, next: start + 1000, stopAt: deathAt },
          ],
          flushPhase,
          reapPhase,
        },
        start + 45_000,
      );
      expect(seen.get(alive.machineId)).toEqual([{ health: 'ready', at: expect.any(Number) }]);
      const lost = seen.get(dies.machineId)!.find((x) => x.health === 'lost');
      expect(lost).toBeDefined();
      const after = lost!.at - deathAt;
      expect(after).toBeGreaterThanOrEqual(lostAfterMs - 1.5 * heartbeatMs);
      expect(after).toBeLessThanOrEqual(lostAfterMs + 1.2 * lostMachinesIntervalMs);
    });
  }

  it('a replica that never saw the heartbeats judges from the rows the other wrote: the machine stays ready, through a stalled liveness loop too, and is lost once silent', async () => {
    h = await ProtocolHarness.create();
    const dir = mkdtempSync(join(tmpdir(), 'gantry-replica-'));
    // A second control plane on the same database: the agents speak to the harness's, this one judges.
    const cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }), {
      store: h.cp.store,
      clock: h.clock,
      random: () => 0.5,
      logger: false,
    });
    other = { cp, dir };
    const m = await h.agent('m1');
    h.advance(h.config.lostAfterMs + 1);
    await m.heartbeat();
    const start = h.clock.t;
    const agents = [{ agent: m, next: start + h.config.heartbeatMs + RTT }];
    const seen = await run({ h, flusher: h.cp, judge: cp, agents, flushPhase: 900, reapPhase: 300 }, start + 30_000);
    expect(seen.get(m.machineId)).toEqual([{ health: 'ready', at: expect.any(Number) }]);
    // Its liveness loop stalled (never writing): a heartbeat finding its row 1.5 periods old writes
    // it itself, so the other replica still never sees the machine suspect.
    const stalled = { ...h.cp, loops: { ...h.cp.loops, liveness: { runOnce: () => Promise.resolve() } } } as unknown as ControlPlane;
    const after = await run({ h, flusher: stalled, judge: cp, agents, flushPhase: 900, reapPhase: 300 }, start + 60_000);
    expect(after.get(m.machineId)).toEqual([{ health: 'ready', at: expect.any(Number) }]);
    // The agent dies: the replica that never saw it marks it lost, from the rows alone.
    const deathAt = h.clock.t + 1;
    const gone = await run({ h, flusher: h.cp, judge: cp, agents: [{ ...agents[0]!, stopAt: deathAt }], flushPhase: 900, reapPhase: 300 }, deathAt + 15_000);
    const lost = gone.get(m.machineId)!.find((x) => x.health === 'lost')!;
    expect(lost.at - deathAt).toBeLessThanOrEqual(h.config.lostAfterMs + 1.2 * h.config.lostMachinesIntervalMs);
  });
});

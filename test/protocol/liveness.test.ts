/**
 * Heartbeats kept in memory (src/api/heartbeat-liveness.ts) against the bound of
 * docs/failure-detection.md, on a fake clock: idle agents heartbeat at their period, the liveness
 * loop writes what they said at its slowest (every 0.48 of a period, the top of its jitter), the
 * lost-machines loop judges at its slowest (1.2 × its interval), each at several phases against
 * the others. A live machine is never suspect; a machine that dies is lost within
 * [lostAfterMs − 1.5 × heartbeatMs, lostAfterMs + 1.2 × lostMachinesIntervalMs]; a replica that
 * never saw the heartbeats judges from the rows the other wrote, and does not mark it lost.
 *
 * And a period that grows with the fleet (domain/heartbeat-period.ts): past the configured rate,
 * answers give a longer period; a live machine on it is never suspect, a dead one is lost within
 * the bound the longer period implies (and that the machine's view shows), the leases of its
 * running attempts hold, and an agent that ignores the new period (one from before it) keeps to
 * the configured one and is judged as safely as before.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import type { MachineView } from '../../src/api/contract/job-view.js';
import { StoreBusyError } from '../../src/domain/errors.js';
import type { HeartbeatResponse } from '../../src/api/contract/agent-protocol.js';
import { type FakeAgent, ProtocolHarness } from '../support/protocol-harness.js';

/** The round trip of an idle heartbeat held its whole period: the next arrives this much after a period. */
const RTT = 40;

interface Sim {
  h: ProtocolHarness;
  /** Runs the loops' passes: the replica that holds the agents' heartbeats flushes, the judging one reaps. */
  flusher: ControlPlane;
  judge: ControlPlane;
  /** `old`: an agent from before the period grew with the fleet, which keeps to the configured one. */
  agents: { agent: FakeAgent; next: number; stopAt?: number; old?: boolean; sheds?: boolean }[];
  flushPhase: number;
  reapPhase: number;
  /** Heartbeats answered 429 heartbeat_shed (agents with `sheds`: they say they honour Retry-After). */
  shed?: number;
}

/**
 * A heartbeat of an agent that honours Retry-After: answered, or shed; when shed, its next comes
 * at the latest the agent's jitter allows (1.25 × Retry-After) and a round trip.
 */
async function shedding(s: Sim, agent: FakeAgent, t: number): Promise<{ next: number } | HeartbeatResponse> {
  const r = await s.h.call('POST', `/v1/agent/machines/${agent.machineId}/heartbeat`, { running: [], waitMs: 0, acceptsShedding: true }, agent.credential);
  if (r.statusCode === 429) {
    expect(JSON.parse(r.body)).toMatchObject({ error: 'heartbeat_shed' });
    s.shed = (s.shed ?? 0) + 1;
    return { next: t + 1.25 * Number(r.headers['retry-after']) * 1000 + RTT };
  }
  expect(r.statusCode).toBe(200);
  return JSON.parse(r.body) as HeartbeatResponse;
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
      const res = a.sheds ? await shedding(s, a.agent, t) : await a.agent.heartbeat();
      if ('next' in res) a.next = res.next;
      else a.next = t + (a.old ? hb : (res.heartbeatMs ?? hb)) + RTT;
    }
    if (nextFlush === t) {
      await flusher.loops.liveness.runOnce();
      nextFlush = t + flushEvery;
    }
    if (nextReap === t) {
      await judge.loops.reconciler.lostMachines.runOnce();
      // Expired leases too (the lost-attempts loop, at the same pace): a running attempt's lease must outlast its machine's period.
      await judge.loops.reconciler.lostAttempts.runOnce();
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

  it("a heartbeat whose transaction is refused busy still counts: its arrival is written by the liveness loop (the store's queue does not delay a sign of life)", async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');
    const at = async () => (await h!.cp.store.machineGet({ machineId: m.machineId }))!.lastHeartbeatAt;
    h.advance(h.config.heartbeatMs + RTT);
    const arrived = h.clock.t;
    // The heartbeat's transaction gives up (PostgreSQL under load: conflicts, or a queue of seconds).
    const store = h.cp.store as { machineHeartbeat: unknown };
    const real = store.machineHeartbeat;
    store.machineHeartbeat = () => Promise.reject(new StoreBusyError(20, new Error('conflict')));
    await expect(m.heartbeat()).rejects.toThrow(/503/);
    store.machineHeartbeat = real;
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

describe('a heartbeat period that grows with the fleet, on a fake clock', () => {
  let h: ProtocolHarness | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
  });

  /** One heartbeat a second for the whole fleet: four machines get a 4 s period, twice the configured 2 s. */
  const RATE = 1;

  async function fleetOf(names: string[], rate = RATE): Promise<FakeAgent[]> {
    h = await ProtocolHarness.create({ maxHeartbeatsPerSecond: rate });
    const agents: FakeAgent[] = [];
    for (const n of names) agents.push(await h.agent(n));
    // The liveness loop counts the fleet: the period answers give from then on.
    await h.cp.loops.liveness.runOnce();
    return agents;
  }

  it('answers give the period for the fleet: the configured one while it is small, machines / rate past it', async () => {
    const [a] = await fleetOf(['a']);
    expect((await a!.heartbeat()).heartbeatMs).toBe(h!.config.heartbeatMs);
    for (const n of ['b', 'c', 'd']) await h!.agent(n);
    await h!.cp.loops.liveness.runOnce();
    h!.advance(h!.config.heartbeatMs);
    expect((await a!.heartbeat()).heartbeatMs).toBe(4000);
    // What the API shows of the machine: its period and the silence that bound implies (written by the liveness loop).
    await h!.cp.loops.liveness.runOnce();
    const view = JSON.parse((await h!.call('GET', `/v1/machines/${a!.machineId}`)).body) as MachineView;
    const grow = 2 * (4000 - h!.config.heartbeatMs);
    expect(view.heartbeat).toEqual({
      periodMs: 4000,
      suspectAfterMs: h!.config.suspectAfterMs + grow,
      lostAfterMs: h!.config.lostAfterMs + grow,
      lostWithinMs: h!.config.lostAfterMs + grow + 1.2 * h!.config.lostMachinesIntervalMs,
    });
  });

  for (const [flushPhase, reapPhase] of [
    [0, 0],
    [470, 1190],
    [955, 30],
  ] as const) {
    it(`on the longer period a live idle machine is never suspect; a dead one is lost within the bound it implies (loops at phases ${flushPhase} / ${reapPhase} ms)`, async () => {
      const [alive, dies, c, d] = await fleetOf(['alive', 'dies', 'c', 'd']);
      const { lostAfterMs, lostMachinesIntervalMs } = h!.config;
      h!.advance(lostAfterMs + 1);
      for (const a of [alive!, dies!, c!, d!]) expect((await a.heartbeat()).heartbeatMs).toBe(4000);
      const start = h!.clock.t;
      const deathAt = start + 20_000 + flushPhase;
      const seen = await run(
        {
          h: h!,
          flusher: h!.cp,
          judge: h!.cp,
          agents: [
            { agent: alive!, next: start + 4000 + RTT },
            { agent: dies!, next: start + 1000, stopAt: deathAt },
            { agent: c!, next: start + 2000 },
            { agent: d!, next: start + 3000 },
          ],
          flushPhase,
          reapPhase,
        },
        start + 50_000,
      );
      for (const m of [alive!, c!, d!]) expect(seen.get(m.machineId)).toEqual([{ health: 'ready', at: expect.any(Number) }]);
      const lost = seen.get(dies!.machineId)!.find((x) => x.health === 'lost');
      expect(lost).toBeDefined();
      // lostAfterMs grown by two periods' growth: 10 + 4 = 14 s; lost no sooner than that less 1.5 periods.
      const allowed = lostAfterMs + 2 * (4000 - h!.config.heartbeatMs);
      const after = lost!.at - deathAt;
      expect(after).toBeGreaterThanOrEqual(allowed - 1.5 * 4000);
      expect(after).toBeLessThanOrEqual(allowed + 1.2 * lostMachinesIntervalMs);
      // Past what the configured period alone allows: the grown bound is what a dead machine costs.
      expect(after).toBeGreaterThan(lostAfterMs + 1.2 * lostMachinesIntervalMs - 4000);
    });
  }

  for (const [flushPhase, reapPhase] of [
    [0, 0],
    [470, 1190],
    [955, 30],
  ] as const) {
    it(`past the budget idle heartbeats are shed; a machine shed again and again is never suspect, a dead one is lost within the bound of the wait it was given (loops at phases ${flushPhase} / ${reapPhase} ms)`, async () => {
      // Six machines where the rate (1 a second) gives each a 6 s period; three agents from before
      // the period grew keep to the configured 2 s (1.5 a second between them): the server is past
      // its budget, and the other three, which honour Retry-After, are shed.
      const agents = await fleetOf(['dies', 'b', 'c', 'old1', 'old2', 'old3']);
      const { lostAfterMs, lostMachinesIntervalMs, heartbeatMs } = h!.config;
      h!.advance(lostAfterMs + 1);
      let period = 0;
      for (const a of agents) period = (await a.heartbeat()).heartbeatMs!;
      expect(period).toBe(6000);
      const start = h!.clock.t;
      const deathAt = start + 20_000 + flushPhase;
      const sim: Sim = {
        h: h!,
        flusher: h!.cp,
        judge: h!.cp,
        agents: agents.map((agent, i) => ({
          agent,
          next: start + 500 + i * 300,
          ...(i < 3 ? { sheds: true } : { old: true }),
          ...(i === 0 ? { stopAt: deathAt } : {}),
        })),
        flushPhase,
        reapPhase,
      };
      const seen = await run(sim, start + 50_000);
      expect(sim.shed).toBeGreaterThan(10);
      for (const a of agents.slice(1)) expect(seen.get(a.machineId)).toEqual([{ health: 'ready', at: expect.any(Number) }]);
      const lost = seen.get(agents[0]!.machineId)!.find((x) => x.health === 'lost');
      expect(lost).toBeDefined();
      // Judged by the longest wait a shed answer allows (1.25 × its Retry-After, ⌈period⌉ s) where it was shed last.
      const waited = 1.25 * Math.ceil(period / 1000) * 1000;
      const after = lost!.at - deathAt;
      expect(after).toBeGreaterThanOrEqual(lostAfterMs + 2 * (period - heartbeatMs) - 1.5 * period);
      expect(after).toBeLessThanOrEqual(lostAfterMs + 2 * (waited - heartbeatMs) + 1.2 * lostMachinesIntervalMs);
    });
  }

  it('an agent from before shedding (no acceptsShedding) or a busy machine is never shed, past the budget too', async () => {
    const agents = await fleetOf(['a', 'b', 'c', 'd', 'e', 'f']);
    h!.advance(h!.config.lostAfterMs + 1);
    // Twelve heartbeats in one period of 6 s where the budget is one a second: past 1.5 times it.
    for (const a of [...agents, ...agents]) expect((await a.heartbeat()).heartbeatMs).toBeGreaterThan(0);
    const asked = await h!.call(
      'POST',
      `/v1/agent/machines/${agents[0]!.machineId}/heartbeat`,
      { running: [], waitMs: 0, acceptsShedding: true },
      agents[0]!.credential,
    );
    expect(asked.statusCode).toBe(429);
    expect(asked.headers['retry-after']).toBe('6');
    // What it lists, it must hear about (leases, kills): answered, whatever the budget.
    const listing = await h!.call(
      'POST',
      `/v1/agent/machines/${agents[1]!.machineId}/heartbeat`,
      { running: [{ attemptId: 'att_unknown', token: 1 }], waitMs: 0, acceptsShedding: true },
      agents[1]!.credential,
    );
    expect(listing.statusCode).toBe(200);
    // The registration's settings say this server sheds.
    expect(agents[0]!.settings).toMatchObject({ shedding: true });
  });

  it('with the liveness loop stalled, a machine on the longer period writes its row itself in time: never suspect', async () => {
    const agents = await fleetOf(['m1', 'm2', 'm3', 'm4']);
    h!.advance(h!.config.lostAfterMs + 1);
    for (const a of agents) await a.heartbeat();
    await h!.cp.loops.liveness.runOnce();
    const start = h!.clock.t;
    const stalled = { ...h!.cp, loops: { ...h!.cp.loops, liveness: { runOnce: () => Promise.resolve() } } } as unknown as ControlPlane;
    const seen = await run(
      { h: h!, flusher: stalled, judge: h!.cp, agents: agents.map((agent) => ({ agent, next: start + 4000 + RTT })), flushPhase: 0, reapPhase: 300 },
      start + 40_000,
    );
    for (const a of agents) expect(seen.get(a.machineId)).toEqual([{ health: 'ready', at: expect.any(Number) }]);
  });

  it('a running attempt keeps its lease on a period longer than the configured lease, for an agent that reads it and one that does not (an agent from before it)', async () => {
    // A 12 s period: longer than the configured 10 s lease, which must grow with it.
    const [fresh, old, c, d] = await fleetOf(['fresh', 'old', 'c', 'd'], 1 / 3);
    expect((await fresh!.heartbeat()).heartbeatMs).toBe(12_000);
    h!.advance(h!.config.lostAfterMs + 1);
    const jobs = [
      await h!.submit({ name: 'on-fresh', stages: [{ name: 's', command: ['sleep', '600'], resources: { cpu: 4 } }] }),
      await h!.submit({ name: 'on-old', stages: [{ name: 's', command: ['sleep', '600'], resources: { cpu: 4 } }] }),
    ];
    // One stage each: a machine of 4 CPUs runs one of them.
    await h!.schedule();
    const held = new Map<FakeAgent, number>();
    for (const a of [fresh!, old!, c!, d!]) {
      const { assignments } = await a.heartbeat();
      for (const x of assignments) await a.acknowledge(x);
      held.set(a, assignments.length);
    }
    const runners = [...held].filter(([, n]) => n > 0).map(([a]) => a);
    expect(runners).toHaveLength(2);
    const start = h!.clock.t;
    const seen = await run(
      {
        h: h!,
        flusher: h!.cp,
        judge: h!.cp,
        agents: [fresh!, old!, c!, d!].map((agent, i) => ({ agent, next: start + 1000 + i * 900, old: agent === old || agent === runners[1] })),
        flushPhase: 200,
        reapPhase: 600,
      },
      start + 90_000,
    );
    for (const a of [fresh!, old!, c!, d!]) expect(seen.get(a.machineId)).toEqual([{ health: 'ready', at: expect.any(Number) }]);
    for (const id of jobs) {
      const job = await h!.job(id);
      expect(job.stages[0]!.state).toBe('running');
      expect(job.stages[0]!.attempts).toHaveLength(1);
    }
  });
});

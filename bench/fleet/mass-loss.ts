import type { FleetLike } from './fleet.js';
import { adminGet, adminPost, type FleetServers } from './fleet-servers.js';

/** A mass loss (`--lose N`): N machines, each holding one long stage, stop at once (a rack, a zone). */
export interface MassLoss {
  /** Machines stopped at once (each held one long stage). */
  lost: number;
  /** Their period and bound, as the API showed the first of them before they stopped. */
  heartbeat?: { periodMs: number; lostAfterMs: number; lostWithinMs: number };
  /** Stopped → the first and the last of them seen lost (ms; the machine list read once a second). */
  firstLostMs: number | null;
  allLostMs: number | null;
  /** Seen lost by the end of the watch. */
  seenLost: number;
  /** Stopped → the first and the last of their stages assigned to another agent (ms). */
  firstElsewhereMs: number | null;
  allElsewhereMs: number | null;
  elsewhere: number;
  /** Why nothing was timed. */
  note?: string;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Submits `n` long stages, each asking for a whole agent's CPUs (so each lands on a machine of its
 * own), waits until every one runs, stops those `n` agents at once, and watches for `watchMs`: when
 * the server marks each machine lost (the machine list, read from the last replica once a second:
 * the leader, which judges them, is the first) and when each stage is assigned to another agent.
 */
export async function massLoss(fleet: FleetLike, servers: FleetServers, o: { n: number; cpu: string; watchMs: number }): Promise<MassLoss> {
  const { urls, admin } = servers;
  const none = { lost: o.n, firstLostMs: null, allLostMs: null, seenLost: 0, firstElsewhereMs: null, allElsewhereMs: null, elsewhere: 0 };
  const jobIds = new Set<string>();
  for (let i = 0; i < o.n; i += 500) {
    const specs = Array.from({ length: Math.min(500, o.n - i) }, (_, k) => ({
      name: `fleet-mass-${i + k}`,
      stages: [{ name: 'long', command: ['sleep', '600'], resources: { cpu: o.cpu, memory: '16Mi' } }],
    }));
    const { jobs } = await adminPost<{ jobs: { id: string }[] }>(urls[0]!, '/v1/jobs/batch', admin, { jobs: specs });
    for (const j of jobs) jobIds.add(j.id);
  }
  // Every long stage running on a machine of its own.
  const holders = new Map<string, string>();
  for (let t = 0; t < 600 && holders.size < o.n; t++) {
    for (const x of fleet.taken) if (jobIds.has(x.a.jobId) && !holders.has(x.a.jobId)) holders.set(x.a.jobId, x.agent);
    if (holders.size < o.n) await sleep(100);
  }
  if (holders.size < o.n) return { ...none, note: `only ${holders.size} of its ${o.n} long stages were placed within 60 s` };
  const victims = new Set(holders.values());
  if (victims.size < o.n) return { ...none, note: `its ${o.n} long stages landed on ${victims.size} machines (not one each)` };
  const names = [...victims];
  const machineOf = new Map(fleet.taken.map((x) => [x.agent, x.machineId]));
  const machineIds = names.map((n) => machineOf.get(n)!);
  const byId = new Set(machineIds);
  for (let t = 0; t < 100 && (await fleet.runningOf(names)).some((r) => r === 0); t++) await sleep(100);
  const shown = await adminGet<{ heartbeat?: MassLoss['heartbeat'] }>(urls[0]!, `/v1/machines/${machineIds[0]!}`, admin).catch(() => null);

  const t0 = performance.now();
  const t0Epoch = Date.now();
  await fleet.kill(names);
  const lostAt = new Map<string, number>();
  const elsewhereAt = new Map<string, number>();
  const watcher = urls[urls.length - 1]!;
  let nextList = 0;
  while (performance.now() - t0 < o.watchMs && (lostAt.size < o.n || elsewhereAt.size < o.n)) {
    for (const x of fleet.taken) if (jobIds.has(x.a.jobId) && !victims.has(x.agent) && !elsewhereAt.has(x.a.jobId)) elsewhereAt.set(x.a.jobId, x.at - t0);
    if (lostAt.size < o.n && performance.now() >= nextList) {
      nextList = performance.now() + 1000;
      const { machines } = await adminGet<{ machines: { id: string; health: string }[] }>(watcher, '/v1/machines', admin).catch(() => ({ machines: [] }));
      const at = performance.now() - t0;
      for (const m of machines) if (byId.has(m.id) && m.health === 'lost' && !lostAt.has(m.id)) lostAt.set(m.id, at);
    }
    await sleep(50);
  }
  const lostMs = [...lostAt.values()];
  const elsewhereMs = [...elsewhereAt.values()];
  // GANTRY_BENCH_MASSLOSS_OUT=FILE: the stop's time on the host's clock and each machine's and stage's time, for the split against the servers' transaction log (bench/mass-loss-split.py).
  const dump = process.env.GANTRY_BENCH_MASSLOSS_OUT;
  if (dump) {
    const { writeFileSync } = await import('node:fs');
    writeFileSync(dump, JSON.stringify({ t0: t0Epoch, machines: machineIds, lostMs, elsewhereMs, elsewhereByJob: Object.fromEntries(elsewhereAt) }));
  }
  return {
    lost: o.n,
    ...(shown?.heartbeat ? { heartbeat: shown.heartbeat } : {}),
    firstLostMs: lostMs.length ? Math.min(...lostMs) : null,
    allLostMs: lostAt.size === o.n ? Math.max(...lostMs) : null,
    seenLost: lostAt.size,
    firstElsewhereMs: elsewhereMs.length ? Math.min(...elsewhereMs) : null,
    allElsewhereMs: elsewhereAt.size === o.n ? Math.max(...elsewhereMs) : null,
    elsewhere: elsewhereAt.size,
  };
}

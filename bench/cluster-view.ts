/**
 * The cluster's view at scale: `clusterView` (a scheduler pass's read of every machine) and
 * `clusterFacts` (the submit's) on a store with N registered machines, a third of them with eight
 * GPUs, each with the containment report a real agent sends; a few running attempts' worth of
 * usage is not needed (the view reads what attempts hold through its own index). Medians of R
 * reads, after a warm-up read. docs/throughput.md, "A fleet of agents".
 *
 *   node --import tsx bench/cluster-view.ts [--machines 10000] [--reads 30] [--store sqlite|postgres]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { openSqliteStore } from '../src/store/sqlite/open-sqlite-store.js';
import type { KyselyStore } from '../src/store/kysely/kysely-store.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const { values: a } = parseArgs({
  options: { machines: { type: 'string', default: '10000' }, reads: { type: 'string', default: '30' }, store: { type: 'string', default: 'sqlite' } },
});
const n = Number(a.machines);
const reads = Number(a.reads);

const containment = {
  mechanism: 'cgroup-v2' as const,
  memory: true,
  cpu: true,
  pids: true,
  devices: true,
  kill: 'cgroup.kill' as const,
  user: 'gantry-run',
  sandbox: null,
  problems: [] as string[],
};

async function open(): Promise<{ store: KyselyStore; done: () => Promise<void> }> {
  if (a.store === 'postgres') {
    const { freshPostgresStore } = await import('../test/support/fresh-postgres-store.js');
    const store = await freshPostgresStore('cview');
    return { store, done: () => store.close() };
  }
  const dir = mkdtempSync(join(tmpdir(), 'gantry-cview-'));
  const store = await openSqliteStore(join(dir, 'gantry.db'));
  return {
    store,
    done: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;

async function timed(f: () => Promise<unknown>): Promise<number> {
  const t = process.hrtime.bigint();
  await f();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

const { store, done } = await open();
try {
  const now = Date.now();
  for (let i = 0; i < n; i++) {
    const gpus =
      i % 3 === 0
        ? Array.from({ length: 8 }, (_, index) => ({
            index,
            uuid: `GPU-${i}-${index}`,
            name: 'NVIDIA H100 80GB HBM3',
            type: 'nvidia-h100-80gb',
            memoryMiB: 81_559,
          }))
        : [];
    await store.machineRegister({
      name: `m${String(i).padStart(6, '0')}`,
      cpuMillis: 64_000,
      memoryBytes: 512 * 2 ** 30,
      gpus,
      gpusDeclared: false,
      region: 'eu-west',
      labels: { rack: `r${i % 40}` },
      agent: { version: '0.1.0', os: 'linux', arch: 'x64', hostname: `host-${i}`, cpus: 64, node: 'v20.20.2' },
      containment,
      now: now + i,
    });
  }
  await store.clusterView();
  const view: number[] = [];
  const facts: number[] = [];
  for (let r = 0; r < reads; r++) {
    view.push(await timed(() => store.clusterView()));
    facts.push(await timed(() => store.clusterFacts()));
  }
  console.log(
    JSON.stringify({
      store: a.store,
      machines: n,
      reads,
      clusterViewMedianMs: +median(view).toFixed(2),
      clusterFactsMedianMs: +median(facts).toFixed(2),
      loadavg: (await import('node:fs')).readFileSync('/proc/loadavg', 'utf8').trim(),
    }),
  );
} finally {
  await done();
}

/**
 * Which GPU pods wait, for which GPU type, under each GPU placement of the pass, on a slice of an
 * Alibaba pod list replayed through `replayTrace` (docs/scheduling.md, "Cost and limits": why
 * gpuspec33's pods waited longer once FGD placed them). Variants, each in its own run:
 *  - `fgd`: FGD with the target workload of one pass's snapshot alone (the queued stages);
 *  - `fgd-paper`, `best-fit`: the same pass with that share policy;
 *  - `fgd-list`: FGD with the whole pod list's workload (as `bench:fgd` measures it);
 *  - `fgd-recent`: FGD with the workload of the last `--recent` GPU pods the passes saw, as the
 *    server plans (`serverPlanner`, `RecentWorkload`; the default of `replayTrace`);
 *  - `old`: `planPlacements` of another checkout's src (`--old DIR`, e.g. commit 47c9aaa's, the
 *    best-fit ranking over 64 machines in name order: `git archive 47c9aaa src | tar -x -C DIR/..`).
 * Prints one JSON line per variant, then the mean wait per GPU spec asked.
 *
 * Usage: npm run bench:trace-waits [-- --list gpuspec33 --from 0 --count 3000 --speedup 1000000
 *   --variants fgd,fgd-paper,best-fit,fgd-list,fgd-recent --recent 1000 --old DIR]
 */
import { resolve } from 'node:path';
import { planPlacements } from '../src/scheduler/plan-placements.js';
import { snapshotWorkload } from '../src/scheduler/snapshot-workload.js';
import type { TargetWorkload } from '../src/scheduler/target-workload.js';
import { loadAlibabaTrace, POD_LIST_FILES, type PodListName } from '../src/sim/alibaba-trace.js';
import { replayTrace, serverPlanner, summarise, withArrivalSpeedup, type Planner } from '../src/sim/trace-replay.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? def) : def;
};
const LIST = arg('list', 'gpuspec33');
if (!Object.hasOwn(POD_LIST_FILES, LIST)) throw new Error(`--list must be one of ${Object.keys(POD_LIST_FILES).join(', ')}, got ${LIST}`);
const FROM = Number(arg('from', '0'));
const COUNT = Number(arg('count', '3000'));
const SPEEDUP = Number(arg('speedup', '1000000'));
const RECENT = Number(arg('recent', '1000'));
const VARIANTS = arg('variants', 'fgd,fgd-paper,best-fit,fgd-list,fgd-recent').split(',');
const OLD = arg('old', '');

async function plannerOf(variant: string, listWorkload: TargetWorkload): Promise<Planner> {
  switch (variant) {
    case 'fgd':
      return planPlacements;
    case 'fgd-paper':
    case 'best-fit':
      return (s, o) => planPlacements(s, { ...o, gpuPolicy: variant });
    case 'fgd-list':
      return (s, o) => planPlacements(s, { ...o, targetWorkload: listWorkload });
    case 'fgd-recent':
      return serverPlanner(RECENT);
    case 'old': {
      if (OLD === '') throw new Error('variant old needs --old DIR (a src/ directory of another commit)');
      const mod = (await import(resolve(OLD, 'scheduler/plan-placements.ts'))) as { planPlacements: Planner };
      return mod.planPlacements;
    }
    default:
      throw new Error(`unknown variant ${variant}`);
  }
}

async function main() {
  const { machines, pods: all } = loadAlibabaTrace(LIST as PodListName);
  const pods = withArrivalSpeedup(all.slice(FROM, FROM + COUNT), SPEEDUP);
  const listWorkload = snapshotWorkload({ queue: all.map((p) => p.stage) });
  const podById = new Map(pods.map((p) => [p.stage.stageId, p]));
  const typeOf = new Map(machines.map((m) => [m.id, new Map(m.gpus.map((g) => [g.index, g.type]))]));
  for (const variant of VARIANTS) {
    const inner = await plannerOf(variant, listWorkload);
    let smallMs = 0;
    let small = 0;
    const planner: Planner = (s, o) => {
      const t = performance.now();
      const plan = inner(s, o);
      if (s.queue.length <= 5) {
        small += 1;
        smallMs += performance.now() - t;
      }
      return plan;
    };
    const t0 = performance.now();
    const r = replayTrace(machines, pods, { planner });
    const wallSeconds = (performance.now() - t0) / 1000;
    const gpu = r.placements.filter((p) => p.gpuIndices.length > 0);
    const all = summarise(gpu.map((p) => p.waitSeconds));
    const bySpec = new Map<string, number[]>();
    /** Where pods that accept any GPU type went. */
    const anyOn = new Map<string, number>();
    for (const p of gpu) {
      const g = podById.get(p.stageId)!.stage.resources.gpu!;
      const spec = g.types.length ? g.types.join('|') : 'any';
      (bySpec.get(spec) ?? bySpec.set(spec, []).get(spec)!).push(p.waitSeconds);
      if (spec === 'any') {
        const t = typeOf.get(p.machineId)!.get(p.gpuIndices[0]!)!;
        anyOn.set(t, (anyOn.get(t) ?? 0) + 1);
      }
    }
    const round = (x: number) => Math.round(x * 10) / 10;
    console.log(
      JSON.stringify({
        variant,
        list: LIST,
        from: FROM,
        count: COUNT,
        speedup: SPEEDUP,
        gpuPods: gpu.length,
        neverPlaced: r.stats.neverPlaced,
        gpuWait: all && { mean: round(all.mean), p95: round(all.p95), max: round(all.max) },
        waited: gpu.filter((p) => p.waitSeconds > 0).length,
        anyTypeOn: Object.fromEntries([...anyOn].sort((a, b) => b[1] - a[1])),
        smallPassMs: small ? Math.round((smallMs / small) * 100) / 100 : null,
        wallSeconds: round(wallSeconds),
      }),
    );
    for (const [spec, w] of [...bySpec].sort((a, b) => b[1].length - a[1].length)) {
      const s = summarise(w)!;
      if (s.max > 0) console.log(`  ${spec}: ${w.length} pods, mean ${round(s.mean)} s, p95 ${round(s.p95)} s, max ${round(s.max)} s`);
    }
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

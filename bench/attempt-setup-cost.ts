/**
 * What containment costs the agent for each attempt, apart from its process: its cgroups made (or
 * taken from the spares) and limited, then read for what it used and removed (or kept as a spare),
 * and its directory made (or a spare renamed into place) and given to its user, then closed and
 * emptied. The same calls the agent makes (CgroupTree, AgentState, openAttemptTo), on this host's
 * real hierarchies and a data directory under /var/tmp, N times in a row with no process in
 * between (no fork, no exec: only the agent's share). Medians of wall time and of the agent's CPU
 * time per cycle, each phase apart. Needs root (cgroups, chown).
 * Usage: node --import tsx bench/attempt-setup-cost.ts [-- --runs 500] [--gpu]
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import type { AssignmentWire } from '../src/api/contract/agent-protocol.js';
import { CgroupTree } from '../src/agent/contain/cgroup-tree.js';
import { detectCgroups } from '../src/agent/contain/detect-cgroups.js';
import { AgentState } from '../src/agent/disk/agent-state.js';
import { openAttemptTo } from '../src/agent/disk/attempt-owner.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const RUNS = Number(arg('--runs') ?? 500);
const GPU = process.argv.includes('--gpu');
const USER = { uid: 61184, gid: 61184, name: 'gantry-61184' };
const MiB = 1024 * 1024;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(0.9 * (xs.length - 1))]!;

/** Wall and CPU (user + system) milliseconds of `fn`. */
async function timed(fn: () => unknown): Promise<[number, number]> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const wall = performance.now() - t0;
  const c = process.cpuUsage(c0);
  return [wall, (c.user + c.system) / 1000];
}

if (process.getuid?.() !== 0) throw new Error('run as root: cgroups are made and directories given to uid 61184');
const base = mkdtempSync('/var/tmp/gantry-setup-bench-');
chmodSync(base, 0o711);
const tree = CgroupTree.create(detectCgroups('/'), { machineName: `bench-${process.pid}`, hostRoot: '/' });
if (!tree.active) throw new Error(`no cgroups usable here: ${tree.enforcement.problems.join('; ')}`);
const state = new AgentState(join(base, 'agent'));
state.closeSettled = true;
const phases = ['cgroup setup', 'cgroup end', 'directory setup', 'directory end'] as const;
const wall: Record<string, number[]> = Object.fromEntries(phases.map((p) => [p, []]));
const cpu: Record<string, number[]> = Object.fromEntries(phases.map((p) => [p, []]));
const total: number[] = [];
const totalCpu: number[] = [];
try {
  await state.init();
  for (let i = 0; i < RUNS + 20; i++) {
    const a: AssignmentWire = {
      attemptId: `att_bench_${process.pid}_${i}`,
      token: 1,
      jobId: 'job_bench',
      stageName: 'a',
      attemptNumber: 1,
      command: ['true'],
      env: {},
      gpuIndices: GPU ? [0] : [],
      timeoutSeconds: null,
      inputs: [],
      limits: { requestCpuMillis: 1000, requestMemoryBytes: 64 * MiB, memoryBytes: null, cpuMillis: null, pids: null, network: false },
    };
    let cg: ReturnType<CgroupTree['create']> = null;
    const spec = { limits: a.limits!, pidsMax: 4096, gpuIndices: a.gpuIndices };
    const t = [
      await timed(() => (cg = tree.create(a.attemptId, spec))),
      await timed(async () => {
        cg!.usage();
        await tree.release(cg!);
      }),
      await timed(async () => openAttemptTo((await state.createAttempt(a))!, USER)),
      await timed(async () => {
        await state.markReported(a.attemptId, { result: 'accepted', at: new Date().toISOString() });
        // Disposed at once rather than kept for a person (KEEP_REPORTED): the spare is what the next cycle reuses.
        await state.prune(0);
      }),
    ];
    // The first cycles make the spares and warm the caches.
    if (i < 20) continue;
    t.forEach(([w, c], k) => (wall[phases[k]!]!.push(w), cpu[phases[k]!]!.push(c)));
    total.push(t.reduce((s, [w]) => s + w, 0));
    totalCpu.push(t.reduce((s, [, c]) => s + c, 0));
  }
} finally {
  await tree.sweep(new Set());
  tree.removeEmpty();
  rmSync(base, { recursive: true, force: true });
}

const f = (ms: number) => ms.toFixed(3);
console.log(`attempt setup and teardown, N = ${RUNS}${GPU ? ', one GPU' : ''}; ${cpus().length} × ${cpus()[0]?.model ?? '?'}; ${tree.enforcement.mechanism}`);
console.log('| phase | wall median ms | wall p90 ms | agent CPU median ms |');
console.log('| --- | --- | --- | --- |');
for (const p of phases) console.log(`| ${p} | ${f(median(wall[p]!))} | ${f(p90(wall[p]!))} | ${f(median(cpu[p]!))} |`);
console.log(`| all four | ${f(median(total))} | ${f(p90(total))} | ${f(median(totalCpu))} |`);

/**
 * A recycled spare's cpu weight on this host's real hierarchies, through the real C launcher
 * (docs/containment.md, "The weight written by the child"): the child waiting in a spare runs at
 * the kernel's default weight, not the last stage's, and a stage's process runs at its own weight
 * from its exec on, in a spare reused for stages of different weights. The weight is read as the
 * kernel sees it: the process's cpu cgroup from /proc/<pid>/cgroup, and that cgroup's
 * `cpu.weight` (v2) or `cpu.shares` (v1). Needs root, a writable hierarchy holding the cpu
 * controller, and a C compiler (the tests' setup builds the launcher); says why when it skips.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { attemptLimits } from '../../../test/support/containment-fixtures.js';
import { fakeAssignment } from '../../../test/support/fake-agent-server.js';
import { CgroupTree } from '../contain/cgroup-tree.js';
import { detectCgroups } from '../contain/detect-cgroups.js';
import type { AttemptPaths } from '../disk/agent-state.js';
import { launchAttempt, type LaunchContext } from './launch-attempt.js';
import { LauncherPool } from './launcher-pool.js';
import { launcherPrograms } from './launcher-programs.js';

const PATH = process.env.PATH ?? '/usr/bin:/bin';
const cProgram = launcherPrograms({ PATH, GANTRY_AGENT_LAUNCHER: 'c' })[0];
const detection = process.getuid?.() === 0 ? detectCgroups('/') : null;

/** Where the cpu controller is here: v2 when its hierarchy offers it, else v1's cpu hierarchy. */
function cpuHierarchy(): { kind: 'v2' | 'v1'; mount: string } | null {
  if (!detection) return null;
  if (detection.v2?.controllers.has('cpu')) return { kind: 'v2', mount: detection.v2.mount };
  const v1 = detection.v1.get('cpu');
  return v1 ? { kind: 'v1', mount: v1.mount } : null;
}
const cpu = cpuHierarchy();
const why = !detection
  ? 'needs root (to make cgroups)'
  : !cpu
    ? 'no cgroup hierarchy holds the cpu controller here'
    : !cProgram
      ? 'no C launcher (no C compiler)'
      : '';
if (why) console.warn(`spare-cpu-weight.test.ts skipped: ${why}`);

/** The cpu weight of the cgroup `pid` is in, as the kernel has it. */
function weightOf(pid: number): string {
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n');
  const path =
    cpu!.kind === 'v2'
      ? lines.find((l) => l.startsWith('0::'))!.slice(3)
      : lines.map((l) => l.split(':')).find(([, controllers]) => controllers!.split(',').includes('cpu'))![2]!;
  return readFileSync(join(cpu!.mount, path, cpu!.kind === 'v2' ? 'cpu.weight' : 'cpu.shares'), 'utf8').trim();
}

let tree: CgroupTree | null = null;
let pool: LauncherPool | null = null;
let dir: string | null = null;
afterEach(async () => {
  pool?.close();
  if (tree) {
    await tree.dropPrepared();
    await tree.sweep(new Set());
    tree.removeEmpty();
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
  tree = pool = dir = null;
});

function attemptPaths(attemptId: string): AttemptPaths {
  const d = join(dir!, attemptId);
  for (const sub of ['work', 'output', 'input']) mkdirSync(join(d, sub), { recursive: true });
  const at = (f: string) => join(d, f);
  return {
    dir: d,
    work: at('work'),
    output: at('output'),
    input: at('input'),
    stdout: at('stdout.log'),
    stderr: at('stderr.log'),
    status: at('status'),
    progress: at('progress.jsonl'),
  };
}

const until = async (cond: () => boolean, ms = 5000) => {
  for (const end = Date.now() + ms; Date.now() < end && !cond();) await new Promise((r) => setTimeout(r, 10));
  return cond();
};

describe.skipIf(why !== '')('a recycled spare on real cgroups, its child and its stages started by the C launcher', () => {
  it("the child waiting in a spare runs at the default weight; each stage's process at its own, from its exec on", async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-weight-'));
    tree = CgroupTree.create(detection!, { machineName: `weight-${process.pid}`, hostRoot: '/' });
    pool = new LauncherPool({ PATH }, () => {}, [cProgram!], 1);
    tree.preparer = pool;
    const ctx: LaunchContext = {
      machineName: 'm1',
      inheritedEnv: { PATH },
      checkpointRoot: join(dir, 'checkpoints'),
      killGraceMs: 500,
      launcher: pool,
      users: { acquire: () => null },
      cgroups: tree,
      recordCgroup: () => {},
      pidsMax: 64,
      sandbox: null,
      gpus: [],
      gpuSharing: 'time-slicing',
      log: () => {},
    };
    const def = cpu!.kind === 'v2' ? '100' : '1024';
    const weight = (millis: number) => (cpu!.kind === 'v2' ? String(Math.round(millis / 10)) : String(Math.round((1024 * millis) / 1000)));
    const stage = (id: string, requestCpuMillis: number) =>
      fakeAssignment('att_', { attemptId: id, command: ['sleep', '30'], limits: attemptLimits({ requestCpuMillis }) });

    // A new cgroup (no spare yet): its weight written by the agent before the start, as always.
    const a = await launchAttempt(ctx, stage('att_c1', 100), attemptPaths('att_c1'));
    const aPid = (await a.handle.started)!;
    expect(weightOf(aPid)).toBe(weight(100));
    await a.handle.kill('test');
    await a.handle.done;
    let spare = a.cgroup!;
    for (const [i, millis] of [200, 2500, 100].entries()) {
      await tree.release(spare);
      // A child joins the spare at its release and waits there, at the default weight.
      expect(spare.prepared).not.toBeNull();
      const procs = spare.procsFiles[0]!;
      expect(await until(() => readFileSync(procs, 'utf8').trim() !== '')).toBe(true);
      const waiting = Number(readFileSync(procs, 'utf8').trim().split('\n')[0]);
      expect(weightOf(waiting), `the waiting child before stage ${i}`).toBe(def);
      // The stage runs in that child, at its own weight.
      const id = `att_s${i}`;
      const s = await launchAttempt(ctx, stage(id, millis), attemptPaths(id));
      expect(s.cgroup!.name).toBe(spare.name);
      const pid = (await s.handle.started)!;
      expect(pid).toBe(waiting);
      expect(weightOf(pid), `stage ${i} (${millis} millicpus)`).toBe(weight(millis));
      await s.handle.kill('test');
      await s.handle.done;
      spare = s.cgroup!;
    }
  });
});

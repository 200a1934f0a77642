/**
 * A start whose cgroup is removed between the agent's mkdir (or its check of a spare) and the
 * command's join (docs/containment.md, "Still there"): started once more in a cgroup made for it.
 * The real C and Python launchers join fake cgroups (test/support/fake-cgroup-host.ts: plain files), and
 * the test plays the cleaner that removes one in that window.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fakeAssignment } from '../../../test/support/fake-agent-server.js';
import { fakeCgroupHost, type FakeCgroupHost } from '../../../test/support/fake-cgroup-host.js';
import type { AttemptCgroup, CgroupRef } from '../contain/attempt-cgroup.js';
import { CgroupTree } from '../contain/cgroup-tree.js';
import { detectCgroups } from '../contain/detect-cgroups.js';
import type { AttemptPaths } from '../disk/agent-state.js';
import { launchAttempt, type LaunchContext } from './launch-attempt.js';
import { Launcher } from './launcher.js';
import { LauncherPool } from './launcher-pool.js';
import { launcherPrograms, type LauncherProgram } from './launcher-programs.js';

const PATH = process.env.PATH ?? '/usr/bin:/bin';
// Each launcher whose forked child joins the cgroups itself: C (built by the tests' setup) and Python.
const joiners = (['c', 'python'] as const).flatMap((name) =>
  launcherPrograms({ PATH, GANTRY_AGENT_LAUNCHER: name }).map((p) => [name, p] as [string, LauncherProgram]),
);
let program: LauncherProgram;

let host: FakeCgroupHost | null = null;
let dir: string | null = null;
let launcher: Launcher | null = null;
let pool: LauncherPool | null = null;
afterEach(() => {
  launcher?.close();
  pool?.close();
  pool = null;
  host?.cleanup();
  if (dir) rmSync(dir, { recursive: true, force: true });
  host = dir = launcher = null;
});

const assignment = (attemptId: string) => fakeAssignment('att_', { attemptId });

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

/**
 * A CgroupTree on a fake v2 host whose cgroups the launcher can join (their cgroup.procs made as
 * files), but which `spoil` spoils for the first `spoiled` cgroups it hands out.
 */
function setup(spoil: (cg: AttemptCgroup) => void, spoiled = 1) {
  host = fakeCgroupHost('v2');
  dir = mkdtempSync(join(tmpdir(), 'gantry-launch-'));
  const tree = CgroupTree.create(detectCgroups(host.root), { machineName: 'm1', hostRoot: host.root, pid: process.pid });
  const made: { name: string; fresh: boolean }[] = [];
  const recorded: CgroupRef[] = [];
  const lines: string[] = [];
  launcher = new Launcher({ PATH }, (l) => lines.push(l), [program]);
  const ctx: LaunchContext = {
    machineName: 'm1',
    inheritedEnv: { PATH },
    checkpointRoot: join(dir, 'checkpoints'),
    killGraceMs: 500,
    launcher,
    users: { acquire: () => null },
    cgroups: {
      create: (attemptId, spec, opts) => {
        const cg = tree.create(attemptId, spec, opts)!;
        made.push({ name: cg.name, fresh: opts?.fresh ?? false });
        if (made.length <= spoiled) spoil(cg);
        else for (const f of cg.procsFiles) writeFileSync(f, '');
        return cg;
      },
      release: (cg) => tree.release(cg),
    },
    recordCgroup: (_id, ref) => recorded.push(ref),
    pidsMax: 64,
    sandbox: null,
    gpus: [],
    gpuSharing: 'time-slicing',
    log: (l) => lines.push(l),
  };
  return { tree, ctx, made, recorded, lines };
}

/** The cleaner: the cgroup's directory removed after the agent made it, before the command joins it. */
const removeIt = (cg: AttemptCgroup) => rmSync(cg.dirs[0]!, { recursive: true });

describe.skipIf(joiners.length === 0).each(joiners)('launchAttempt with the %s launcher, a cgroup removed before the command joined it', (_name, p) => {
  beforeEach(() => {
    program = p;
  });

  it('starts the command again, once, in cgroups made for it, which it joins', async () => {
    const { ctx, made, lines } = setup(removeIt);
    const launched = await launchAttempt(ctx, assignment('att_1'), attemptPaths('att_1'));
    expect(await launched.handle.started).toBeGreaterThan(0);
    expect(await launched.handle.done).toMatchObject({ kind: 'exited', exitCode: 0 });
    expect(made).toEqual([
      { name: 'att_1', fresh: false },
      { name: 'att_1', fresh: true },
    ]);
    // The command joined the new one (the launcher's child wrote "0", its own pid, into it).
    expect(readFileSync(launched.cgroup!.procsFiles[0]!, 'utf8')).toBe('0');
    expect(lines).toContainEqual(expect.stringMatching(/att_1: its cgroup att_1 was removed before its command joined it; starting it again in a new one/));
  });

  it('given a spare that was removed, journals the new cgroup in place of the spare', async () => {
    const { tree, ctx, made, recorded } = setup(removeIt);
    // An ended attempt's cgroup kept as a spare, then handed to att_2 and removed before its join.
    await tree.release(tree.create('att_0', { limits: null, pidsMax: 64, gpuIndices: [] })!);
    const launched = await launchAttempt(ctx, assignment('att_2'), attemptPaths('att_2'));
    expect(await launched.handle.done).toMatchObject({ kind: 'exited', exitCode: 0 });
    expect(made).toEqual([
      { name: 'att_0', fresh: false },
      { name: 'att_2', fresh: true },
    ]);
    // A restart finds it by the last record: its own, new (nothing to subtract).
    expect(recorded.map((r) => r.name)).toEqual(['att_0', 'att_2']);
    expect(recorded[1]!.baseline).toEqual({ oomKills: 0, cpuSeconds: 0, memoryPeakBytes: null });
  });

  it('fails the start (spawn-failed) when the cgroup is removed again, or when the join fails for another reason', async () => {
    const again = setup(removeIt, 2);
    const twice = await launchAttempt(again.ctx, assignment('att_3'), attemptPaths('att_3'));
    expect(await twice.handle.done).toMatchObject({
      kind: 'spawn-failed',
      spawnCause: 'cgroup-gone',
      reason: expect.stringMatching(/removed before it joined .*, twice: the second time in cgroups made for it$/),
    });
    expect(again.made).toHaveLength(2);
    launcher!.close();
    host!.cleanup();
    rmSync(dir!, { recursive: true, force: true });
    // cgroup.procs a directory: the join fails (EISDIR), and no new cgroup would cure that.
    const other = setup((cg) => mkdirSync(cg.procsFiles[0]!));
    const launched = await launchAttempt(other.ctx, assignment('att_4'), attemptPaths('att_4'));
    const end = await launched.handle.done;
    expect(end).toMatchObject({ kind: 'spawn-failed', reason: expect.stringMatching(/could not join its cgroups/) });
    expect(end.spawnCause).toBeUndefined();
    expect(other.made).toHaveLength(1);
  });
});

const cProgram = launcherPrograms({ PATH, GANTRY_AGENT_LAUNCHER: 'c' })[0];

describe.skipIf(!cProgram)('launchAttempt with the C launcher, a recycled spare', () => {
  const until = async (cond: () => boolean, ms = 3000) => {
    for (const end = Date.now() + ms; Date.now() < end && !cond();) await new Promise((r) => setTimeout(r, 10));
    return cond();
  };
  const procsOf = (cg: AttemptCgroup) => cg.procsFiles.map((f) => readFileSync(f, 'utf8'));

  /** An ended attempt's cgroup, released into a spare by a tree whose spares get a prepared child (or none: `prepare` false). */
  async function spareAfterRelease(prepare: boolean) {
    host = fakeCgroupHost('v2');
    dir = mkdtempSync(join(tmpdir(), 'gantry-launch-'));
    const tree = CgroupTree.create(detectCgroups(host.root), { machineName: 'm1', hostRoot: host.root, pid: process.pid });
    const lines: string[] = [];
    pool = new LauncherPool({ PATH }, (l) => lines.push(l), [cProgram!], 2);
    if (prepare) tree.preparer = pool;
    const ended = tree.create('att_0', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    for (const f of ended.procsFiles) writeFileSync(f, '');
    await tree.release(ended);
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
      log: (l) => lines.push(l),
    };
    return { ended, ctx, lines };
  }

  it("starts the attempt given a spare in the child a launcher prepared there at the spare's release, which had joined it already", async () => {
    const { ended, ctx } = await spareAfterRelease(true);
    // The prepared child joined the spare's cgroups (the fake cgroup.procs holds its "0") before any attempt had it.
    expect(await until(() => procsOf(ended).every((t) => t === '0'))).toBe(true);
    for (const f of ended.procsFiles) writeFileSync(f, '');
    const launched = await launchAttempt(ctx, assignment('att_1'), attemptPaths('att_1'));
    expect(launched.cgroup!.name).toBe('att_0');
    expect(await launched.handle.started).toBeGreaterThan(0);
    expect(await launched.handle.done).toMatchObject({ kind: 'exited', exitCode: 0 });
    // Its command joined nothing at its start: it was the prepared child, in them since the release.
    expect(procsOf(launched.cgroup!)).toEqual(['']);
    // The child is used up: the cgroup carries none into its next release.
    expect(launched.cgroup!.prepared).toBeNull();
  });

  it('without a preparer, or with its child killed, the start joins as before', async () => {
    const plain = await spareAfterRelease(false);
    const a = await launchAttempt(plain.ctx, assignment('att_2'), attemptPaths('att_2'));
    expect(await a.handle.done).toMatchObject({ kind: 'exited', exitCode: 0 });
    expect(procsOf(a.cgroup!)).toEqual(['0']);
    pool!.close();
    host!.cleanup();
    rmSync(dir!, { recursive: true, force: true });

    const { ended, ctx } = await spareAfterRelease(true);
    expect(await until(() => procsOf(ended).every((t) => t === '0'))).toBe(true);
    // The launcher's child in the spare, killed (as an OOM by a smaller limit, or anyone's kill, would).
    const child = Number(execFileSync('pgrep', ['-n', '-P', String(launcherPid())], { encoding: 'utf8' }).trim());
    process.kill(child, 'SIGKILL');
    for (const f of ended.procsFiles) writeFileSync(f, '');
    const b = await launchAttempt(ctx, assignment('att_3'), attemptPaths('att_3'));
    expect(await b.handle.started).not.toBe(child);
    expect(await b.handle.done).toMatchObject({ kind: 'exited', exitCode: 0 });
    expect(procsOf(b.cgroup!)).toEqual(['0']);
  });
});

/** The pid of this test's live C launcher (a child of this process; not a closed pool's launcher not yet reaped, a zombie). */
function launcherPid(): number {
  const out = execFileSync('ps', ['-o', 'pid=,stat=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' });
  const line = out.split('\n').find((l) => /gantry-launcher/.test(l) && !/^\s*\d+\s+Z/.test(l));
  if (!line) throw new Error(`no launcher among ${out}`);
  return Number(line.trim().split(/\s+/)[0]);
}

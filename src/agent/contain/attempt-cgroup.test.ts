/**
 * An attempt's cgroups on this host's real hierarchies: v1 limits (memory and its OOM count, pids,
 * the CFS quota, devices), the v1 freezer's kill, and v2's `cgroup.kill` and `cgroup.events` (the
 * CI machine is hybrid: docs/containment.md). Processes join as the launcher makes them: the
 * command's own shell writes its pid into each `cgroup.procs`, then execs. Every cgroup and
 * process made here is killed and removed after each test, whatever its result.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { attemptLimits, MiB, processGone } from '../../../test/support/containment-fixtures.js';
import { sleep } from '../../lib/sleep.js';
import type { AttemptCgroup } from './attempt-cgroup.js';
import { CgroupTree } from './cgroup-tree.js';
import { detectCgroups, type CgroupDetection } from './detect-cgroups.js';

/** Why the real hierarchies cannot be used here, or null. */
function unavailable(): { v1: string | null; v2: string | null; detection: CgroupDetection | null } {
  if (process.getuid?.() !== 0) return { v1: 'needs root (to make cgroups)', v2: 'needs root (to make cgroups)', detection: null };
  const detection = detectCgroups('/');
  const missing = (['memory', 'cpu', 'cpuacct', 'pids', 'freezer', 'devices'] as const).filter(
    (c) => !detection.v1.has(c) || !canMakeDir(detection.v1.get(c)!.own),
  );
  const v1 = missing.length ? `needs writable v1 hierarchies of ${missing.join(', ')} (see /proc/self/mountinfo)` : null;
  let v2: string | null = 'needs a writable cgroup v2 hierarchy with cgroup.kill (Linux 5.14)';
  if (detection.v2) {
    const probe = join(detection.v2.own, `gantry-probe-${process.pid}`);
    try {
      mkdirSync(probe);
      try {
        readFileSync(join(probe, 'cgroup.kill'));
      } catch (err) {
        // cgroup.kill is write-only: EINVAL on read means it is there.
        if ((err as NodeJS.ErrnoException).code === 'EINVAL') v2 = null;
      }
      rmdirSync(probe);
    } catch {
      // Not writable: v2 stays unavailable.
    }
  }
  return { v1, v2, detection };
}

function canMakeDir(dir: string): boolean {
  const probe = join(dir, `gantry-probe-${process.pid}`);
  try {
    mkdirSync(probe);
    rmdirSync(probe);
    return true;
  } catch {
    return false;
  }
}

const host = unavailable();
const skipped = (why: string | null) => (why ? ` (skipped: ${why})` : '');

let seq = 0;
const trees: CgroupTree[] = [];
const children: ChildProcess[] = [];
const tempDirs: string[] = [];

afterEach(async () => {
  for (const t of trees.splice(0)) {
    const swept = await t.sweep(new Set());
    t.removeEmpty();
    expect(swept.failed).toEqual([]);
  }
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const d of tempDirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/**
 * A tree of this host's hierarchies, under a machine name of its own; `withoutV2`: as a v1-only
 * host (the freezer kills); `hostRoot`: where it reads `proc/devices` (the real one by default).
 */
function hostTree(opts: { withoutV2?: boolean; hostRoot?: string } = {}): CgroupTree {
  const d = host.detection!;
  const t = CgroupTree.create(opts.withoutV2 ? { ...d, v2: null } : d, { machineName: `test-${process.pid}-${++seq}`, hostRoot: opts.hostRoot ?? '/' });
  trees.push(t);
  return t;
}

const limits = attemptLimits;

interface Started {
  child: ChildProcess;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr: () => string;
}

/** Runs `script` under sh after the shell joined every cgroup of `cg`, as the launcher's child does before it execs. */
function startIn(cg: AttemptCgroup, script: string): Started {
  const join = 'for f in $GANTRY_PROCS; do echo $$ > "$f" || exit 97; done; ';
  const child = spawn('/bin/sh', ['-c', join + script], {
    env: { ...process.env, GANTRY_PROCS: cg.procsFiles.join(' ') },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  children.push(child);
  let err = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, exit, stderr: () => err };
}

async function until(what: string, check: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** A stage that leaves things behind: a `setsid` child (out of the group) and a double-forked daemon (out of the tree). */
const ESCAPERS = 'setsid sleep 313 & (sleep 314 &) ; exec sleep 315';

/**
 * ESCAPERS settled: its three sleeps and nothing else. Three pids alone can be a moment of its
 * start (the shell before its exec, the subshell before it forks its sleep), and a signal sent then
 * reaches four processes.
 */
function threeSleeps(cg: Pick<AttemptCgroup, 'pids'>): boolean {
  const pids = cg.pids();
  if (pids.length !== 3) return false;
  return pids.every((pid) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'sleep';
    } catch {
      return false;
    }
  });
}

describe(`an attempt's cgroup on real v1 hierarchies${skipped(host.v1)}`, () => {
  it.skipIf(host.v1 !== null)('is OOM-killed at its 64 MiB limit, and its usage says so with its peak', async () => {
    const t = hostTree();
    expect(t.enforcement.memory).toBe('v1');
    const cg = t.create('att_oom', { limits: limits(), pidsMax: 256, gpuIndices: [] })!;
    const p = startIn(cg, `exec python3 -c 'b = bytearray(b"x") * (300 * 1024 * 1024); print(len(b))'`);
    expect(await p.exit).toEqual({ code: null, signal: 'SIGKILL' });
    expect(await cg.waitEmpty(5000)).toBe(true);
    const u = cg.usage();
    expect(u.oomKills).toBe(1);
    expect(u.memoryLimitBytes).toBe(64 * MiB);
    expect(u.memoryPeakBytes).toBeGreaterThan(56 * MiB);
    expect(u.memoryPeakBytes).toBeLessThanOrEqual(64 * MiB);
    expect(u.cpuSeconds).toBeGreaterThan(0);
  });

  it.skipIf(host.v1 !== null)("is made when the agent's own subtree was removed (an empty cgroup anyone may rmdir), and its limits hold", async () => {
    const t = hostTree();
    // Another cleaner (a test run's teardown, a script) removed the agent's empty gantry-<machine> directories.
    const probe = t.create('att_probe', { limits: limits(), pidsMax: 64, gpuIndices: [] })!;
    const bases = [...new Set(probe.layout.v1.values())].map((d) => join(d, '..'));
    await probe.remove();
    for (const b of bases) rmdirSync(b);
    expect(bases.some((b) => existsSync(b))).toBe(false);
    const cg = t.create('att_again', { limits: limits({ pids: 16 }), pidsMax: 64, gpuIndices: [] })!;
    expect(cg.layout.v1.size).toBeGreaterThan(0);
    for (const d of cg.layout.v1.values()) expect(existsSync(d)).toBe(true);
    expect(readFileSync(join(cg.layout.v1.get('pids')!, 'pids.max'), 'utf8').trim()).toBe('16');
  });

  it.skipIf(host.v1 !== null)('a spare removed under the agent is not handed out: the next attempt joins a cgroup made anew, its limits held', async () => {
    const t = hostTree();
    const spec = { limits: limits({ pids: 16 }), pidsMax: 64, gpuIndices: [] };
    const a = t.create('att_spare', spec)!;
    const first = startIn(a, 'true');
    expect(await first.exit).toEqual({ code: 0, signal: null });
    expect(await a.waitEmpty(5000)).toBe(true);
    await t.release(a);
    // Another test run's teardown removes empty cgroups it did not make (test/support/cgroup-leftovers.ts).
    for (const d of [...a.dirs].reverse()) rmdirSync(d);
    const b = t.create('att_after', spec)!;
    expect(b.name).toBe('att_after');
    const p = startIn(b, 'cat /proc/self/cgroup >&2');
    expect(await p.exit).toEqual({ code: 0, signal: null });
    expect(p.stderr()).toContain('/att_after');
    expect(readFileSync(join(b.layout.v1.get('pids')!, 'pids.max'), 'utf8').trim()).toBe('16');
  });

  it.skipIf(host.v1 !== null)('stops a fork loop at its pids limit', async () => {
    const cg = hostTree().create('att_pids', { limits: limits({ pids: 16 }), pidsMax: 4096, gpuIndices: [] })!;
    const p = startIn(cg, 'i=0; while [ $i -lt 100 ]; do sleep 60 & i=$((i+1)); done; wait');
    const { code } = await p.exit;
    // The shell's fork failed (EAGAIN): it says so and gives up, its children left in the cgroup.
    expect(code).not.toBe(0);
    expect(p.stderr()).toMatch(/fork/i);
    expect(cg.pids().length).toBeLessThan(16);
    await cg.killAll();
    expect(await cg.waitEmpty(5000)).toBe(true);
  });

  it.skipIf(host.v1 !== null)('caps a busy loop at half a CPU with limits.cpu 0.5', async () => {
    const cg = hostTree().create('att_cpu', { limits: limits({ requestCpuMillis: 250, cpuMillis: 500 }), pidsMax: 64, gpuIndices: [] })!;
    startIn(cg, 'while :; do :; done');
    await until('the loop to join', () => cg.pids().length > 0);
    await sleep(200);
    const t0 = Date.now();
    const c0 = cg.usage().cpuSeconds!;
    await sleep(2000);
    const share = (cg.usage().cpuSeconds! - c0) / ((Date.now() - t0) / 1000);
    expect(share).toBeGreaterThan(0.3);
    expect(share).toBeLessThan(0.7);
    await cg.killAll();
    expect(await cg.waitEmpty(5000)).toBe(true);
  });

  it.skipIf(host.v1 !== null)("lets it open its own GPU's device, not another's", async () => {
    const dev = mkdtempSync(join(tmpdir(), 'gantry-dev-'));
    tempDirs.push(dev);
    // Device nodes of GPUs 0 and 1 with no driver behind them, made outside the cgroup (inside,
    // mknod of 195:1 is refused too): opening the one allowed reaches the driver (ENXIO), the
    // other is refused by the devices cgroup first (EPERM).
    execFileSync('mknod', [`${dev}/nvidia0`, 'c', '195', '0']);
    execFileSync('mknod', [`${dev}/nvidia1`, 'c', '195', '1']);
    const cg = hostTree().create('att_dev', { limits: null, pidsMax: 64, gpuIndices: [0] })!;
    const p = startIn(cg, `(head -c1 ${dev}/nvidia0; head -c1 ${dev}/nvidia1; head -c1 /dev/zero) 2>&1 >/dev/null | cat >&2`);
    expect((await p.exit).code).toBe(0);
    expect(p.stderr()).toMatch(/nvidia0.*No such device or address/);
    expect(p.stderr()).toMatch(/nvidia1.*Operation not permitted/);
    expect(p.stderr()).not.toMatch(/zero/);
  });

  it.skipIf(host.v1 !== null || host.v2 !== null)(
    'a CPU attempt on a host without NVIDIA devices gets no devices cgroup (nothing to keep from it); its CPU time comes from v2',
    async () => {
      const nvidia = /^\s*195 /m.test(readFileSync('/proc/devices', 'utf8'));
      const cg = hostTree().create('att_nodev', { limits: null, pidsMax: 64, gpuIndices: [] })!;
      expect(cg.dirs.some((d) => d.startsWith('/sys/fs/cgroup/devices/'))).toBe(nvidia);
      const p = startIn(cg, 'i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done');
      expect((await p.exit).code).toBe(0);
      expect(await cg.waitEmpty(5000)).toBe(true);
      expect(cg.usage().cpuSeconds).toBeGreaterThan(0);
    },
  );

  it.skipIf(host.v1 !== null)("lets a MIG attempt open its own MIG device's capability files only, and a whole-GPU attempt none", async () => {
    const dev = mkdtempSync(join(tmpdir(), 'gantry-caps-'));
    tempDirs.push(dev);
    // This host has no NVIDIA driver: its /proc/devices is given a free major named nvidia-caps,
    // read from a root of the test's own, and the nodes are made with it. Opening one the rules
    // allow reaches no driver (ENXIO); one they do not is refused first (EPERM).
    const real = readFileSync('/proc/devices', 'utf8');
    const used = new Set(real.split('\n').flatMap((l) => (/^\s*(\d+)\s/.exec(l) ? [Number(/^\s*(\d+)/.exec(l)![1])] : [])));
    const major = [...Array(200).keys()].map((i) => 511 - i).find((m) => !used.has(m))!;
    mkdirSync(join(dev, 'proc'));
    writeFileSync(join(dev, 'proc/devices'), real.replace(/^Block devices:/m, `${major} nvidia-caps\n\nBlock devices:`));
    for (const minor of [21, 22, 30]) execFileSync('mknod', [`${dev}/nvidia-cap${minor}`, 'c', String(major), String(minor)]);
    const t = hostTree({ hostRoot: dev });
    const tryAll = `for m in 21 22 30; do head -c1 ${dev}/nvidia-cap$m; done 2>&1 >/dev/null | cat >&2`;

    const mig = t.create('att_mig', { limits: null, pidsMax: 64, gpuIndices: [0], nvidiaCaps: [21, 22] })!;
    const p = startIn(mig, tryAll);
    expect((await p.exit).code).toBe(0);
    expect(p.stderr()).toMatch(/nvidia-cap21.*No such device or address/);
    expect(p.stderr()).toMatch(/nvidia-cap22.*No such device or address/);
    expect(p.stderr()).toMatch(/nvidia-cap30.*Operation not permitted/);

    // A whole-GPU attempt, and a CPU attempt (kept from them on a host with nvidia-caps even without NVIDIA's 195).
    for (const [id, gpuIndices] of [
      ['att_whole', [0]],
      ['att_cpu', []],
    ] as const) {
      const w = startIn(t.create(id, { limits: null, pidsMax: 64, gpuIndices })!, tryAll);
      expect((await w.exit).code).toBe(0);
      expect(w.stderr().match(/Operation not permitted/g)).toHaveLength(3);
    }

    // Its device's files unknown: the whole major, as before.
    const open = t.create('att_open', { limits: null, pidsMax: 64, gpuIndices: [0], nvidiaCaps: 'all' })!;
    const o = startIn(open, tryAll);
    expect((await o.exit).code).toBe(0);
    expect(o.stderr().match(/No such device or address/g)).toHaveLength(3);
  });

  it.skipIf(host.v1 !== null)('killAll with the freezer kills a setsid child and a double-forked daemon', async () => {
    const t = hostTree({ withoutV2: true });
    expect(t.enforcement).toMatchObject({ mechanism: 'cgroup-v1', kill: 'freezer' });
    const cg = t.create('att_frz', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    startIn(cg, ESCAPERS);
    await until('three sleeps', () => threeSleeps(cg));
    const pids = cg.pids();
    await cg.killAll();
    expect(await cg.waitEmpty(5000)).toBe(true);
    for (const pid of pids) expect(processGone(pid), `pid ${pid}`).toBe(true);
    await cg.remove();
    expect(t.open('att_frz')).toBeNull();
  });
});

describe(`an attempt's cgroup on the real v2 hierarchy${skipped(host.v2)}`, () => {
  it.skipIf(host.v2 !== null)('is populated while anything of it runs, and cgroup.kill empties it', async () => {
    const t = hostTree();
    expect(t.enforcement.kill).toBe('cgroup.kill');
    const cg = t.create('att_kill', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    expect(cg.populated()).toBe(false);
    const p = startIn(cg, ESCAPERS);
    await until('three sleeps', () => threeSleeps(cg));
    expect(cg.populated()).toBe(true);
    const pids = cg.pids();
    // The leader's exit leaves the other two: still populated.
    process.kill(p.child.pid!, 'SIGKILL');
    await p.exit;
    await until('the leader to leave', () => cg.pids().length === 2);
    expect(cg.populated()).toBe(true);
    await cg.killAll();
    expect(await cg.waitEmpty(5000)).toBe(true);
    for (const pid of pids) expect(processGone(pid), `pid ${pid}`).toBe(true);
  });

  it.skipIf(host.v2 !== null)('signal() reaches every process of it, in whatever group or session', async () => {
    const cg = hostTree().create('att_term', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    startIn(cg, ESCAPERS);
    await until('three sleeps', () => threeSleeps(cg));
    expect(cg.signal('SIGTERM')).toBe(3);
    expect(await cg.waitEmpty(5000)).toBe(true);
  });

  it.skipIf(host.v2 !== null)('sweep() kills and removes the attempt cgroups not kept, and only those', async () => {
    const t = hostTree();
    const kept = t.create('att_kept', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    const left = t.create('att_left', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    startIn(kept, 'exec sleep 300');
    startIn(left, ESCAPERS);
    await until('both to run', () => kept.pids().length === 1 && left.pids().length === 3);
    const leftPids = left.pids();
    expect(await t.sweep(new Set(['att_kept']))).toEqual({ removed: ['att_left'], failed: [] });
    for (const pid of leftPids) expect(processGone(pid)).toBe(true);
    expect(t.open('att_left')).toBeNull();
    expect(kept.pids()).toHaveLength(1);
    expect(t.open('att_kept')?.pids()).toEqual(kept.pids());
  });
});

describe(`a recycled cgroup on this host's real hierarchies${skipped(host.v1)}`, () => {
  const v1File = (cg: AttemptCgroup, controller: 'memory' | 'cpu' | 'pids', file: string) =>
    readFileSync(join(cg.layout.v1.get(controller)!, file), 'utf8').trim();

  it.skipIf(host.v1 !== null)(
    "goes to the next attempt empty, with that attempt's limits (raised, then none), and counts none of the last one's OOM kills, peak or CPU",
    async () => {
      const t = hostTree();
      const a = t.create('att_rc1', { limits: limits(), pidsMax: 256, gpuIndices: [] })!;
      const p = startIn(a, `i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; exec python3 -c 'b = bytearray(b"x") * (300 * 1024 * 1024)'`);
      expect(await p.exit).toEqual({ code: null, signal: 'SIGKILL' });
      expect(await a.waitEmpty(5000)).toBe(true);
      const ua = a.usage();
      expect(ua.oomKills).toBe(1);
      await t.release(a);

      // Raised: on v1 the memsw limit must go up first, or the kernel refuses the memory limit.
      const b = t.create('att_rc2', {
        limits: limits({ memoryBytes: 128 * MiB, requestCpuMillis: 500, cpuMillis: 500, pids: 32 }),
        pidsMax: 256,
        gpuIndices: [],
      })!;
      expect(b.dirs).toEqual(a.dirs);
      expect(b.ref).toMatchObject({ name: 'att_rc1', baseline: { oomKills: 1 } });
      expect(b.populated()).toBe(false);
      expect(v1File(b, 'memory', 'memory.limit_in_bytes')).toBe(String(128 * MiB));
      expect(v1File(b, 'cpu', 'cpu.cfs_quota_us')).toBe('50000');
      expect(v1File(b, 'cpu', 'cpu.shares')).toBe('512');
      expect(v1File(b, 'pids', 'pids.max')).toBe('32');
      const q = startIn(b, 'exit 0');
      expect((await q.exit).code).toBe(0);
      expect(await b.waitEmpty(5000)).toBe(true);
      const ub = b.usage();
      expect(ub.oomKills).toBe(0);
      // The peak was reset (v1): a shell's, far below the last attempt's 64 MiB.
      expect(ub.memoryPeakBytes).toBeLessThan(32 * MiB);
      expect(ub.cpuSeconds).toBeLessThan(ua.cpuSeconds!);
      expect(ub.memoryLimitBytes).toBe(128 * MiB);
      await t.release(b);

      const c = t.create('att_rc3', { limits: null, pidsMax: 100, gpuIndices: [] })!;
      expect(c.dirs).toEqual(a.dirs);
      expect(Number(v1File(c, 'memory', 'memory.limit_in_bytes'))).toBeGreaterThan(2 ** 62);
      expect(v1File(c, 'cpu', 'cpu.cfs_quota_us')).toBe('-1');
      expect(v1File(c, 'cpu', 'cpu.shares')).toBe('1024');
      expect(v1File(c, 'pids', 'pids.max')).toBe('100');
      // After a restart it is found by its journaled ref, with the same baseline.
      expect(t.open('att_rc3', c.ref)?.usage().oomKills).toBe(0);
      expect(t.open('att_rc3')).toBeNull();
      await t.release(c);
      // The spares go when the agent stops.
      t.removeEmpty();
      for (const d of a.dirs) expect(existsSync(d), d).toBe(false);
    },
  );

  it.skipIf(host.v1 !== null)("keeps the next attempt from the last one's GPU: its devices rules are its own", async () => {
    const dev = mkdtempSync(join(tmpdir(), 'gantry-dev-'));
    tempDirs.push(dev);
    execFileSync('mknod', [`${dev}/nvidia0`, 'c', '195', '0']);
    execFileSync('mknod', [`${dev}/nvidia1`, 'c', '195', '1']);
    const t = hostTree();
    const a = t.create('att_gpu0', { limits: null, pidsMax: 64, gpuIndices: [0] })!;
    a.usage();
    await t.release(a);
    const b = t.create('att_gpu1', { limits: null, pidsMax: 64, gpuIndices: [1] })!;
    expect(b.dirs).toEqual(a.dirs);
    const p = startIn(b, `(head -c1 ${dev}/nvidia0; head -c1 ${dev}/nvidia1) 2>&1 >/dev/null | cat >&2`);
    expect((await p.exit).code).toBe(0);
    expect(p.stderr()).toMatch(/nvidia0.*Operation not permitted/);
    expect(p.stderr()).toMatch(/nvidia1.*No such device or address/);
  });

  it.skipIf(host.v1 !== null)('kills what is still in it at its release, and is handed out only once empty', async () => {
    const t = hostTree();
    const a = t.create('att_rl1', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    startIn(a, ESCAPERS);
    await until('three sleeps', () => threeSleeps(a));
    const pids = a.pids();
    a.usage();
    await t.release(a);
    for (const pid of pids) expect(processGone(pid), `pid ${pid}`).toBe(true);
    const b = t.create('att_rl2', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    expect(b.dirs).toEqual(a.dirs);
    expect(b.pids()).toEqual([]);
  });

  it.skipIf(host.v1 !== null)('the sweep at start keeps a recycled cgroup an attempt still runs in, by its name, and removes the spares', async () => {
    const t = hostTree();
    const first = t.create('att_sw1', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    const spare = t.create('att_sw2', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    await t.release(first);
    await t.release(spare);
    const running = t.create('att_sw3', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    expect(running.name).not.toBe('att_sw3');
    startIn(running, 'exec sleep 300');
    await until('it to run', () => running.pids().length === 1);
    const other = running.name === 'att_sw1' ? 'att_sw2' : 'att_sw1';
    expect(await t.sweep(new Set([running.name]))).toEqual({ removed: [other], failed: [] });
    expect(running.pids()).toHaveLength(1);
    // No spare is left to hand out: the next attempt gets a cgroup of its own.
    expect(t.create('att_sw4', { limits: null, pidsMax: 64, gpuIndices: [] })!.name).toBe('att_sw4');
  });
});

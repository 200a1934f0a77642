/**
 * The subtree and an attempt's limit files against fake hosts (test/support/fake-cgroup-host.ts):
 * what is written where on v2 and v1, without a kernel to refuse it. The real hierarchies are
 * exercised by attempt-cgroup.test.ts.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import type { AttemptLimitsWire } from '../../api/contract/containment.js';
import { fakeCgroupHost, FAKE_V1_OWN, FAKE_V2_OWN, type FakeCgroupHost } from '../../../test/support/fake-cgroup-host.js';
import { attemptLimits, MiB } from '../../../test/support/containment-fixtures.js';
import { CgroupTree } from './cgroup-tree.js';
import { detectCgroups } from './detect-cgroups.js';

let host: FakeCgroupHost | null = null;
afterEach(() => {
  host?.cleanup();
  host = null;
});

const limits = (over: Partial<AttemptLimitsWire> = {}) => attemptLimits({ requestCpuMillis: 1500, ...over });

function tree(h: FakeCgroupHost, pid = process.pid): CgroupTree {
  return CgroupTree.create(detectCgroups(h.root), { machineName: 'm1', hostRoot: h.root, pid });
}

const read = (file: string) => readFileSync(file, 'utf8');

describe('CgroupTree on pure v2', () => {
  it('moves the agent into gantry-<machine>/agent and enables memory, cpu and pids for attempts', () => {
    host = fakeCgroupHost('v2', { pid: 4242 });
    const t = tree(host, 4242);
    const own = host.at(`sys/fs/cgroup${FAKE_V2_OWN}`);
    expect(read(`${own}/gantry-m1/agent/cgroup.procs`)).toBe('4242');
    expect(read(`${own}/cgroup.subtree_control`)).toBe('+memory\n+cpu\n+pids\n');
    expect(read(`${own}/gantry-m1/cgroup.subtree_control`)).toBe('+memory\n+cpu\n+pids\n');
    expect(t.enforcement).toMatchObject({ mechanism: 'cgroup-v2', memory: 'v2', cpu: 'v2', pids: 'v2', devices: false, kill: 'cgroup.kill' });
    expect(t.enforcement.problems).toEqual([expect.stringMatching(/^devices are not restricted/)]);
  });

  it("writes an attempt's limits: memory.max with no swap and one OOM for the group, cpu.weight, cpu.max, pids.max", () => {
    host = fakeCgroupHost('v2');
    const t = tree(host);
    const cg = t.create('att_1', { limits: limits({ memoryBytes: 96 * MiB, cpuMillis: 500, pids: 64 }), pidsMax: 4096, gpuIndices: [0] })!;
    const dir = host.at(`sys/fs/cgroup${FAKE_V2_OWN}/gantry-m1/att_1`);
    expect(cg.procsFiles).toEqual([`${dir}/cgroup.procs`]);
    expect(read(`${dir}/memory.max`)).toBe(String(96 * MiB));
    expect(read(`${dir}/memory.swap.max`)).toBe('0');
    expect(read(`${dir}/memory.oom.group`)).toBe('1');
    expect(read(`${dir}/cpu.weight`)).toBe('150');
    expect(read(`${dir}/cpu.max`)).toBe('50000 100000');
    expect(read(`${dir}/pids.max`)).toBe('64');
  });

  it('limits memory to the request without limits.memory, leaves CPU uncapped without limits.cpu, and takes the pids limit from the agent', () => {
    host = fakeCgroupHost('v2');
    const t = tree(host);
    t.create('att_2', { limits: limits({ requestCpuMillis: 250_000 }), pidsMax: 512, gpuIndices: [] });
    const dir = host.at(`sys/fs/cgroup${FAKE_V2_OWN}/gantry-m1/att_2`);
    expect(read(`${dir}/memory.max`)).toBe(String(64 * MiB));
    // 250 CPUs: the weight's top.
    expect(read(`${dir}/cpu.weight`)).toBe('10000');
    expect(() => read(`${dir}/cpu.max`)).toThrow(/ENOENT/);
    expect(read(`${dir}/pids.max`)).toBe('512');
  });

  it('an assignment from a server before containment (no limits): only the pids limit', () => {
    host = fakeCgroupHost('v2');
    const t = tree(host);
    t.create('att_3', { limits: null, pidsMax: 4096, gpuIndices: [] });
    const dir = host.at(`sys/fs/cgroup${FAKE_V2_OWN}/gantry-m1/att_3`);
    expect(read(`${dir}/pids.max`)).toBe('4096');
    for (const f of ['memory.max', 'cpu.weight', 'cpu.max']) expect(() => read(`${dir}/${f}`)).toThrow(/ENOENT/);
  });

  it("a spare's waiting child killed by the OOM killer before the hand-out is no OOM kill of the next attempt (found in review)", async () => {
    host = fakeCgroupHost('v2');
    const t = tree(host);
    t.preparer = { prepare: () => ({ launcher: 0, token: 'p1' }) };
    const a = t.create('att_oa', { limits: limits(), pidsMax: 64, gpuIndices: [] })!;
    const dir = host.at(`sys/fs/cgroup${FAKE_V2_OWN}/gantry-m1/att_oa`);
    writeFileSync(`${dir}/memory.events`, 'oom 1\noom_kill 1\n');
    await t.release(a);
    // The child waiting in it since the release is killed under the last attempt's limit (or picked by the host's OOM killer).
    writeFileSync(`${dir}/memory.events`, 'oom 2\noom_kill 2\n');
    const b = t.create('att_ob', { limits: limits(), pidsMax: 64, gpuIndices: [] })!;
    expect(b.dirs).toEqual([dir]);
    expect(b.ref?.baseline.oomKills).toBe(2);
    expect(b.usage().oomKills).toBe(0);
  });

  it('reads usage, the OOM count and emptiness from the v2 files', () => {
    host = fakeCgroupHost('v2');
    const t = tree(host);
    const cg = t.create('att_4', { limits: limits(), pidsMax: 4096, gpuIndices: [] })!;
    const dir = host.at(`sys/fs/cgroup${FAKE_V2_OWN}/gantry-m1/att_4`);
    writeFileSync(`${dir}/memory.events`, 'low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\n');
    writeFileSync(`${dir}/memory.peak`, `${64 * MiB}\n`);
    writeFileSync(`${dir}/cpu.stat`, 'usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n');
    expect(cg.usage()).toEqual({ oomKills: 1, memoryPeakBytes: 64 * MiB, cpuSeconds: 2.5, memoryLimitBytes: 64 * MiB });
    writeFileSync(`${dir}/cgroup.events`, 'populated 1\nfrozen 0\n');
    expect(cg.populated()).toBe(true);
    writeFileSync(`${dir}/cgroup.events`, 'populated 0\nfrozen 0\n');
    expect(cg.populated()).toBe(false);
    // The next start finds it and reopens it; an attempt it never made has none.
    expect(t.open('att_4')?.dirs).toEqual([dir]);
    expect(t.open('att_none')).toBeNull();
  });

  it("recycles an ended attempt's cgroup: the next gets its directory with only what differs written, counts from its baseline, and is found again by its ref", async () => {
    host = fakeCgroupHost('v2');
    const t = tree(host);
    const a = t.create('att_a', { limits: limits({ memoryBytes: 96 * MiB, cpuMillis: 500, pids: 64 }), pidsMax: 4096, gpuIndices: [] })!;
    const dir = host.at(`sys/fs/cgroup${FAKE_V2_OWN}/gantry-m1/att_a`);
    expect(a.ref).toBeNull();
    writeFileSync(`${dir}/memory.events`, 'oom 2\noom_kill 2\n');
    writeFileSync(`${dir}/memory.peak`, `${80 * MiB}\n`);
    writeFileSync(`${dir}/cpu.stat`, 'usage_usec 3000000\n');
    expect(a.usage()).toEqual({ oomKills: 2, memoryPeakBytes: 80 * MiB, cpuSeconds: 3, memoryLimitBytes: 96 * MiB });
    await t.release(a);
    // A file whose value the next attempt keeps is not written again.
    writeFileSync(`${dir}/memory.swap.max`, 'untouched');

    const b = t.create('att_b', { limits: limits(), pidsMax: 512, gpuIndices: [] })!;
    expect(b.dirs).toEqual([dir]);
    expect(b.ref).toEqual({ name: 'att_a', baseline: { oomKills: 2, cpuSeconds: 3, memoryPeakBytes: 80 * MiB } });
    expect(read(`${dir}/memory.max`)).toBe(String(64 * MiB));
    expect(read(`${dir}/memory.swap.max`)).toBe('untouched');
    expect(read(`${dir}/cpu.weight`)).toBe('150');
    // No cap for this one: back to the kernel's default.
    expect(read(`${dir}/cpu.max`)).toBe('max 100000');
    expect(read(`${dir}/pids.max`)).toBe('512');
    // Nothing moved: none of the last attempt's OOM kills or CPU, and its peak (not reset on v2) is not this one's.
    expect(b.usage()).toEqual({ oomKills: 0, memoryPeakBytes: null, cpuSeconds: 0, memoryLimitBytes: 64 * MiB });
    writeFileSync(`${dir}/memory.events`, 'oom 3\noom_kill 3\n');
    writeFileSync(`${dir}/memory.peak`, `${90 * MiB}\n`);
    writeFileSync(`${dir}/cpu.stat`, 'usage_usec 4500000\n');
    const used = { oomKills: 1, memoryPeakBytes: 90 * MiB, cpuSeconds: 1.5, memoryLimitBytes: 64 * MiB };
    expect(b.usage()).toEqual(used);
    // A restart finds it by the ref journaled with the attempt, and subtracts the same baseline; by the attempt's id alone, there is none.
    expect(t.open('att_b', b.ref)?.usage()).toEqual(used);
    expect(t.open('att_b')).toBeNull();

    await t.release(b);
    const c = t.create('att_c', { limits: null, pidsMax: 4096, gpuIndices: [] })!;
    expect(c.dirs).toEqual([dir]);
    for (const [f, v] of Object.entries({ 'memory.max': 'max', 'memory.swap.max': 'max', 'memory.oom.group': '0', 'cpu.weight': '100', 'pids.max': '4096' }))
      expect(read(`${dir}/${f}`), f).toBe(v);
    await t.release(c);
    // The spares go when the agent stops (a fake directory holds files, and stays: the real hierarchies' test sees it go).
    t.removeEmpty();
    expect(t.create('att_d', { limits: null, pidsMax: 64, gpuIndices: [] })!.ref).toBeNull();
  });

  it('releases a cgroup its end found empty without reading it again (nothing joins it but its own launch); one never found empty is read', async () => {
    host = fakeCgroupHost('v2');
    const t = tree(host);
    const spec = { limits: null, pidsMax: 64, gpuIndices: [] };
    const a = t.create('att_a', spec)!;
    const dir = host.at(`sys/fs/cgroup${FAKE_V2_OWN}/gantry-m1/att_a`);
    // Its end: the handle's read finds it empty (cgroup-kill.ts), then usage.
    expect(a.populated()).toBe(false);
    a.usage();
    // A read now would fail (a directory where the file is): the release makes none, and keeps it as a spare.
    rmSync(`${dir}/cgroup.events`, { force: true });
    mkdirSync(`${dir}/cgroup.events`);
    await t.release(a);
    rmSync(`${dir}/cgroup.events`, { recursive: true });
    writeFileSync(`${dir}/cgroup.events`, 'populated 0\n');
    expect(t.create('att_b', spec)!.name).toBe('att_a');
    // Never read empty (its kill gave up): the release reads it, and says what it could not read.
    const c = t.create('att_c', spec)!;
    const cDir = host.at(`sys/fs/cgroup${FAKE_V2_OWN}/gantry-m1/att_c`);
    c.usage();
    rmSync(`${cDir}/cgroup.events`, { force: true });
    mkdirSync(`${cDir}/cgroup.events`);
    await expect(t.release(c)).rejects.toThrow(/cgroup\.events/);
  });

  it('hands out a recycled cgroup only empty: one found populated is removed and another made', async () => {
    host = fakeCgroupHost('v2');
    const t = tree(host);
    const a = t.create('att_a', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    a.usage();
    await t.release(a);
    const dir = host.at(`sys/fs/cgroup${FAKE_V2_OWN}/gantry-m1/att_a`);
    // (On a real host nothing joins it meanwhile; the fake's file says otherwise, and the spare is not used.)
    writeFileSync(`${dir}/cgroup.events`, 'populated 1\n');
    const b = t.create('att_b', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    expect(b.name).toBe('att_b');
    expect(b.ref).toBeNull();
  });

  it('hands out no spare that was removed under it (an empty cgroup anyone may rmdir): another is made, and a dead one released is not handed out later', async () => {
    host = fakeCgroupHost('v2');
    const t = tree(host);
    const spec = { limits: limits(), pidsMax: 64, gpuIndices: [] };
    await t.release(t.create('att_a', spec)!);
    const dir = host.at(`sys/fs/cgroup${FAKE_V2_OWN}/gantry-m1/att_a`);
    // A cleaner (another test run's teardown, a tidying script) removes the empty spare. The same
    // limits are asked for, so reusing it would write nothing and notice nothing.
    rmSync(dir, { recursive: true });
    const b = t.create('att_b', spec)!;
    expect(b.name).toBe('att_b');
    expect(b.dirs.every((d) => existsSync(d))).toBe(true);
    // An attempt whose cgroup went while it ran (emptied, then removed): the next start does not get it.
    rmSync(b.dirs[0]!, { recursive: true });
    await t.release(b);
    expect(t.create('att_c', spec)!.name).toBe('att_c');
  });

  it('a cgroup that holds other processes cannot hand controllers down: it says how to fix it, and still kills with cgroup.kill', () => {
    host = fakeCgroupHost('v2', { pid: 4242 });
    host.write(`sys/fs/cgroup${FAKE_V2_OWN}/cgroup.procs`, '4242\n17\n18\n');
    const t = tree(host, 4242);
    expect(t.enforcement).toMatchObject({ mechanism: 'cgroup-v2', memory: null, cpu: null, pids: null, kill: 'cgroup.kill' });
    expect(t.enforcement.problems[0]).toBe(
      `the agent's cgroup ${host.at(`sys/fs/cgroup${FAKE_V2_OWN}`)} holds other processes (17, 18), so it cannot hand memory, cpu, pids to attempts (cgroup v2 allows no process beside child cgroups): run the agent alone in a cgroup of its own (systemd: Delegate=yes)`,
    );
    expect(t.enforcement.problems).toContainEqual(expect.stringMatching(/^memory is not limited/));
  });

  it('refuses ids that are not directory names', () => {
    host = fakeCgroupHost('v2');
    const t = tree(host);
    expect(() => t.create('../x', { limits: null, pidsMax: 64, gpuIndices: [] })).toThrow(/attempt id "..\/x" cannot name a cgroup directory/);
    expect(() => t.create('agent', { limits: null, pidsMax: 64, gpuIndices: [] })).toThrow(/cannot name a cgroup directory/);
    expect(() => CgroupTree.create(detectCgroups(host!.root), { machineName: '../m', hostRoot: host!.root })).toThrow(/machine name/);
  });
});

describe('CgroupTree on v1', () => {
  it('memory with swap, CPU shares and quota on the co-mounted cpu,cpuacct, pids, and devices: NVIDIA only the GPUs given', () => {
    host = fakeCgroupHost('v1');
    const t = tree(host);
    expect(t.enforcement).toMatchObject({ mechanism: 'cgroup-v1', memory: 'v1', cpu: 'v1', pids: 'v1', devices: true, kill: 'freezer', problems: [] });
    const cg = t.create('att_1', { limits: limits({ cpuMillis: 2000, memoryBytes: 128 * MiB }), pidsMax: 4096, gpuIndices: [1, 3] })!;
    const at = (h: string) => host!.at(`sys/fs/cgroup/${h}${FAKE_V1_OWN}/gantry-m1/att_1`);
    // One directory per hierarchy: cpu and cpuacct share theirs.
    expect([...cg.procsFiles].sort()).toEqual(['cpu,cpuacct', 'devices', 'freezer', 'memory', 'pids'].map((h) => `${at(h)}/cgroup.procs`));
    expect(read(`${at('memory')}/memory.limit_in_bytes`)).toBe(String(128 * MiB));
    expect(read(`${at('memory')}/memory.memsw.limit_in_bytes`)).toBe(String(128 * MiB));
    expect(read(`${at('cpu,cpuacct')}/cpu.shares`)).toBe('1536');
    expect(read(`${at('cpu,cpuacct')}/cpu.cfs_period_us`)).toBe('100000');
    expect(read(`${at('cpu,cpuacct')}/cpu.cfs_quota_us`)).toBe('200000');
    expect(read(`${at('pids')}/pids.max`)).toBe('4096');
    expect(read(`${at('devices')}/devices.deny`)).toBe('a');
    expect(read(`${at('devices')}/devices.allow`)).toBe(
      ['b *:* rwm', 'c 1:* rwm', 'c 4:* rwm', 'c 5:* rwm', 'c 136:* rwm', 'c 508:* rwm', 'c 195:1 rwm', 'c 195:3 rwm', 'c 195:254 rwm', 'c 195:255 rwm'].join(
        '',
      ),
    );
    writeFileSync(`${at('memory')}/memory.oom_control`, 'oom_kill_disable 0\nunder_oom 0\noom_kill 2\n');
    writeFileSync(`${at('memory')}/memory.max_usage_in_bytes`, `${100 * MiB}\n`);
    writeFileSync(`${at('cpu,cpuacct')}/cpuacct.usage`, '1500000000\n');
    expect(cg.usage()).toEqual({ oomKills: 2, memoryPeakBytes: 100 * MiB, cpuSeconds: 1.5, memoryLimitBytes: 128 * MiB });
    // Without a v2 hierarchy, empty is every cgroup.procs empty.
    writeFileSync(`${at('pids')}/cgroup.procs`, '77\n');
    expect(cg.populated()).toBe(true);
    expect(cg.pids()).toEqual([77]);
    writeFileSync(`${at('pids')}/cgroup.procs`, '');
    expect(cg.populated()).toBe(false);
  });

  it("devices on a host with MIG's nvidia-caps major: a MIG attempt only its own capability minors, a whole-GPU attempt none, an unknown device's attempt the whole major", () => {
    host = fakeCgroupHost('v1');
    host.write('proc/devices', 'Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n511 nvidia-caps\n\nBlock devices:\n  7 loop\n');
    const t = tree(host);
    const allow = (id: string) => read(host!.at(`sys/fs/cgroup/devices${FAKE_V1_OWN}/gantry-m1/${id}/devices.allow`));
    const nvidia = (gpu: number) => `c 195:${gpu} rwm` + 'c 195:254 rwmc 195:255 rwm';
    t.create('att_mig', { limits: null, pidsMax: 64, gpuIndices: [0], nvidiaCaps: [21, 22] });
    expect(allow('att_mig')).toBe('b *:* rwmc 1:* rwmc 508:* rwm' + nvidia(0) + 'c 511:21 rwmc 511:22 rwm');
    t.create('att_whole', { limits: null, pidsMax: 64, gpuIndices: [1] });
    expect(allow('att_whole')).toBe('b *:* rwmc 1:* rwmc 508:* rwm' + nvidia(1));
    t.create('att_unknown', { limits: null, pidsMax: 64, gpuIndices: [0], nvidiaCaps: 'all' });
    expect(allow('att_unknown')).toBe('b *:* rwmc 1:* rwmc 508:* rwm' + nvidia(0) + 'c 511:* rwm');
  });

  it('a GPU index that is no /dev/nvidia minor is refused, naming the attempt', () => {
    host = fakeCgroupHost('v1');
    expect(() => tree(host!).create('att_g', { limits: null, pidsMax: 64, gpuIndices: [254] })).toThrow(/attempt att_g: GPU index 254 is not a minor/);
  });

  it('a hierarchy where it cannot make its directory is left out, and the rest chosen again', () => {
    host = fakeCgroupHost('v1');
    // The memory hierarchy's own cgroup is a file: mkdir under it fails (ENOTDIR).
    rmSync(host.at(`sys/fs/cgroup/memory${FAKE_V1_OWN}`), { recursive: true });
    host.write(`sys/fs/cgroup/memory${FAKE_V1_OWN}`, '');
    const t = tree(host);
    expect(t.enforcement).toMatchObject({ mechanism: 'cgroup-v1', memory: null, cpu: 'v1', pids: 'v1', kill: 'freezer' });
    expect(t.enforcement.problems[0]).toMatch(
      /^cannot create .*memory\/system.slice\/gantry-agent.service\/gantry-m1 \(ENOTDIR.*\): memory not used; the agent must run as root/,
    );
    expect(t.enforcement.problems[1]).toMatch(/^memory is not limited/);
  });
});

describe('CgroupTree on a hybrid host', () => {
  it('uses the v2 hierarchy for the kill when its cgroups have cgroup.kill, else the v1 freezer', () => {
    host = fakeCgroupHost('hybrid');
    // A real kernel gives every new v2 cgroup its cgroup.kill; the fake one gets it here.
    host.write('sys/fs/cgroup/unified/gantry-m1/cgroup.kill', '');
    const t = tree(host);
    expect(t.enforcement).toMatchObject({ mechanism: 'cgroup-hybrid', memory: 'v1', kill: 'cgroup.kill', problems: [] });
    const cg = t.create('att_1', { limits: null, pidsMax: 64, gpuIndices: [] })!;
    expect(cg.procsFiles[0]).toBe(host.at('sys/fs/cgroup/unified/gantry-m1/att_1/cgroup.procs'));

    const older = fakeCgroupHost('hybrid');
    try {
      // Linux before 5.14: no cgroup.kill, so the v2 hierarchy is of no use; the freezer kills.
      const t2 = tree(older);
      expect(t2.enforcement).toMatchObject({ mechanism: 'cgroup-v1', kill: 'freezer', v2: false });
    } finally {
      older.cleanup();
    }
  });
});

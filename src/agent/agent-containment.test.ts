/**
 * Containment through a real agent (docs/containment.md): its attempts in cgroups of this host,
 * limited, killed whole, measured, removed; what it registers and logs; and an agent on a host
 * that offers nothing, which says so and runs stages all the same (or refuses, when told to
 * require containment). The server is the in-memory one of agent.test.ts, which hands out
 * assignments with `limits` as a server of protocol 3 does.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AssignmentWire } from '../api/contract/agent-protocol.js';
import type { AttemptLimitsWire } from '../api/contract/containment.js';
import { FakeServer, TEST_JOIN_TOKEN, fakeAssignment } from '../../test/support/fake-agent-server.js';
import { attemptLimits, MiB, processGone } from '../../test/support/containment-fixtures.js';
import { Agent } from './agent.js';
import { removeAgentCgroups, setUpCgroups } from './contain/agent-cgroups.js';
import type { ContainmentOptions } from './contain/containment-options.js';
import { detectCgroups } from './contain/detect-cgroups.js';
import { cgroupJoinWait, cgroupJoinWaitHint } from './contain/cgroup-join-wait.js';
import { AgentState } from './disk/agent-state.js';
import { readAttemptRecords } from './disk/attempt-journal.js';
import { processGroupAlive } from './attempt/process-group.js';
import type { DetectedGpu, DetectedMachine } from './machine/machine-detect.js';

const machine: DetectedMachine = {
  name: `contain-${process.pid}`,
  cpuMillis: 2000,
  memoryBytes: 2 ** 30,
  gpus: [],
  gpusDeclared: false,
  region: null,
  labels: {},
};

/** Why this host cannot contain the agent's attempts (memory, pids and a kill of all), or null. */
function hostCannotContain(): string | null {
  if (process.getuid?.() !== 0) return 'needs root, to make cgroups';
  const probeDir = mkdtempSync(join(tmpdir(), 'gantry-probe-'));
  try {
    const { tree, enforcement: e } = setUpCgroups({ mode: 'auto', hostRoot: '/' }, `probe-${process.pid}`, probeDir);
    tree?.removeEmpty();
    if (e.memory && e.pids && e.kill !== 'process-group') return null;
    return `this host's cgroups do not limit memory and pids and kill all: ${e.problems.join('; ')}`;
  } finally {
    rmSync(probeDir, { recursive: true, force: true });
  }
}
const cannot = hostCannotContain();

const assignment = (over: Partial<AssignmentWire> = {}): AssignmentWire => fakeAssignment('att_c', over);

const limits = (over: Partial<AttemptLimitsWire> = {}) => attemptLimits({ requestCpuMillis: 500, ...over });

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 8000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let dir: string;
let srv: FakeServer;
let agents: Agent[];
let lines: string[];
/** Pids the tests' commands wrote: whatever is still alive of them is killed after each test. */
let pidFiles: string[];

async function startAgent(containment: Partial<ContainmentOptions> = {}, on: DetectedMachine = machine): Promise<Agent> {
  const agent = new Agent({
    joinToken: TEST_JOIN_TOKEN,
    serverUrl: srv.url,
    dataDir: join(dir, 'data'),
    machine: on,
    log: (l) => lines.push(l),
    retry: { tries: 2, baseMs: 20 },
    stopDeliverMs: 300,
    pidDelayMs: 0,
    containment,
  });
  agents.push(agent);
  await agent.start();
  return agent;
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-contain-'));
  srv = new FakeServer({ heartbeatMs: 500, leaseMs: 5000, killGraceMs: 300, protocol: 3 });
  await srv.listen();
  agents = [];
  lines = [];
  pidFiles = [];
});

afterEach(async () => {
  for (const a of agents) await a.stop();
  for (const f of pidFiles) for (const pid of readPids(f)) if (!processGone(pid)) process.kill(pid, 'SIGKILL');
  await srv.close();
  await rm(dir, { recursive: true, force: true });
});

const reported = (attemptId: string) => new AgentState(join(dir, 'data')).readReported(attemptId);
const completed = (a: AssignmentWire) => srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId, 15_000);

/**
 * A command that leaves a `setsid` child (out of its process group) and a double-forked daemon
 * (out of its process tree) behind, each writing its pid to a file of its own, then does `rest`.
 */
let pidFileCount = 0;
function escaping(rest: string): { command: string[]; env: Record<string, string>; pids: string } {
  const pids = join(dir, `pids-${++pidFileCount}`);
  pidFiles.push(pids);
  return {
    command: ['sh', '-c', `setsid sleep 313 & echo $! >> "$PIDS"; (sleep 314 & echo $! >> "$PIDS"); ${rest}`],
    env: { PIDS: pids },
    pids,
  };
}

function readPids(file: string): number[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number);
}

/** The attempt's cgroup directories still there, in any hierarchy, under this machine's subtrees. */
function cgroupDirsOf(attemptId: string): string[] {
  const d = detectCgroups('/');
  const owns = new Set([...(d.v2 ? [d.v2.own] : []), ...[...d.v1.values()].map((h) => h.own)]);
  const found: string[] = [];
  for (const own of owns) {
    for (const sub of readdirSync(own)) {
      if (sub.startsWith(`gantry-${machine.name}.`) && existsSync(join(own, sub, attemptId))) found.push(join(own, sub, attemptId));
    }
  }
  return found;
}

/**
 * The attempt's cgroups that still hold a process of it. An ended attempt's cgroup may stay as a
 * spare for the next attempt (docs/containment.md, "Recycled cgroups"), holding at most one C
 * launcher's child waiting for that attempt's job ("A child waiting in a spare"): the launcher's
 * binary, not exec'd, no process of any attempt. Anything else, or a second such child, is occupied.
 */
function occupiedCgroupsOf(attemptId: string): string[] {
  const waiting = (pid: number) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'gantry-launcher';
    } catch {
      return false;
    }
  };
  return cgroupDirsOf(attemptId).filter((dir) => {
    const pids = readPids(join(dir, 'cgroup.procs'));
    return pids.length > 1 || pids.some((pid) => !waiting(pid));
  });
}

describe(`an agent containing its attempts in this host's cgroups${cannot ? ` (skipped: ${cannot})` : ''}`, () => {
  it.skipIf(cannot !== null)('registers what it enforces, and says it in one line of its log', async () => {
    await startAgent();
    const reg = await srv.waitFor((e) => e.type === 'register');
    expect(reg.body.agent.containment).toMatchObject({ memory: true, pids: true, sandbox: null, user: expect.stringMatching(/^agent root \(0\)$/) });
    expect(reg.body.agent.containment.kill).not.toBe('process-group');
    expect(reg.body.agent.containment.mechanism).toMatch(/^cgroup-/);
    expect(lines.filter((l) => l.startsWith(`agent ${machine.name}: containment cgroup-`))).toHaveLength(1);
  });

  it.skipIf(cannot !== null)("says whether the host's cgroups make a burst's first join wait (favordynmods), in its report and once in its log", async () => {
    await startAgent();
    const reg = await srv.waitFor((e) => e.type === 'register');
    // As this host is: this project's CI host mounts its cgroups without it, a host set up for short stages with it.
    const host = cgroupJoinWait(readFileSync('/proc/self/mountinfo', 'utf8'));
    const hint = cgroupJoinWaitHint(host);
    expect(reg.body.agent.containment.favordynmods).toBe(host.kind === 'favoured');
    const said = lines.filter((l) => l.includes('favordynmods'));
    if (hint) {
      expect(reg.body.agent.containment.problems).toContain(hint);
      expect(said).toEqual([`agent ${machine.name}: ${hint}`]);
    } else {
      expect(said).toEqual([]);
    }
  });

  it.skipIf(cannot !== null)('ends an attempt over its 64 MiB limit oom-killed, with its peak, while the one beside it succeeds', async () => {
    await startAgent();
    const hog = assignment({ command: ['python3', '-c', 'b = bytearray(b"x") * (300 * 1024 * 1024)'], limits: limits() });
    const neighbour = assignment({
      command: ['python3', '-c', 'import time; b = bytearray(b"x") * (100 * 1024 * 1024); time.sleep(1); print("fine")'],
      limits: limits({ requestMemoryBytes: 128 * MiB, memoryBytes: 256 * MiB }),
    });
    srv.push({ assignments: [hog, neighbour] });
    const [h, nb] = await Promise.all([completed(hog), completed(neighbour)]);
    expect(h.body).toMatchObject({ exitCode: null, signal: 'SIGKILL', end: { kind: 'oom-killed' } });
    expect(h.body.end.detail).toMatch(
      /^out of memory: the attempt reached its memory limit of 64 MiB \(resources\.memory\) and the kernel killed it \(peak 6\d\.\d MiB\); raise resources\.memory, or set limits\.memory above it$/,
    );
    expect(h.body.usage.memoryPeakBytes).toBeGreaterThan(56 * MiB);
    expect(h.body.usage.memoryPeakBytes).toBeLessThanOrEqual(64 * MiB);
    expect(h.body.usage.cpuSeconds).toBeGreaterThan(0);
    expect(nb.body).toMatchObject({ exitCode: 0, signal: null, end: { kind: 'exited', detail: null } });
    expect(nb.body.usage.memoryPeakBytes).toBeGreaterThan(100 * MiB);
    await until('both settled', async () => (await reported(hog.attemptId)) !== null && (await reported(neighbour.attemptId)) !== null);
    expect([...occupiedCgroupsOf(hog.attemptId), ...occupiedCgroupsOf(neighbour.attemptId)]).toEqual([]);
  });

  it.skipIf(cannot !== null)('leaves no process of an attempt after it exits, times out, is canceled or is preempted', async () => {
    await startAgent();
    const exits = escaping('exit 0');
    const timesOut = escaping('exec sleep 300');
    const canceled = escaping('exec sleep 300');
    // Preempted with a grace of its own, which it spends ignoring TERM: KILL comes after it.
    const preempted = escaping("trap '' TERM; sleep 300");
    const a = {
      exits: assignment({ ...exits, limits: limits() }),
      timesOut: assignment({ ...timesOut, timeoutSeconds: 1, limits: limits() }),
      canceled: assignment({ ...canceled, limits: limits() }),
      preempted: assignment({ ...preempted, limits: limits() }),
    };
    srv.push({ assignments: Object.values(a) });
    await until('every command to leave its two behind', () => [canceled, preempted].every((x) => readPids(x.pids).length === 2));
    await until('their pids', () => [a.canceled, a.preempted].every((x) => srv.of('start', x.attemptId).some((e) => e.body.pid !== null)));
    srv.push({
      kill: [
        { attemptId: a.canceled.attemptId, reason: 'canceled' },
        { attemptId: a.preempted.attemptId, reason: 'preempted', graceMs: 400 },
      ],
    });
    expect((await completed(a.exits)).body).toMatchObject({ exitCode: 0, end: { kind: 'exited' } });
    expect((await completed(a.timesOut)).body).toMatchObject({ end: { kind: 'timeout', detail: 'timeout after 1 s' } });
    for (const x of Object.values(a)) await until(`${x.attemptId} settled`, async () => (await reported(x.attemptId)) !== null);
    expect(await reported(a.canceled.attemptId)).toMatchObject({ result: 'dropped', note: 'canceled' });
    expect(await reported(a.preempted.attemptId)).toMatchObject({ result: 'dropped', note: 'preempted' });
    for (const x of [exits, timesOut, canceled, preempted]) {
      const pids = readPids(x.pids);
      expect(pids).toHaveLength(2);
      for (const pid of pids) expect(processGone(pid), `pid ${pid} of ${x.pids}`).toBe(true);
    }
    for (const x of Object.values(a)) expect(occupiedCgroupsOf(x.attemptId)).toEqual([]);
  });

  it.skipIf(cannot !== null)('reports an oom-killed end and its usage from its journal after a restart, its cgroups gone already', async () => {
    srv.failCompletes = true;
    const first = await startAgent();
    const hog = assignment({ command: ['python3', '-c', 'b = bytearray(b"x") * (300 * 1024 * 1024)'], limits: limits({ memoryBytes: 96 * MiB }) });
    srv.push({ assignments: [hog] });
    await completed(hog);
    await first.stop();
    expect(await reported(hog.attemptId)).toBeNull();
    expect(cgroupDirsOf(hog.attemptId)).toEqual([]);
    srv.failCompletes = false;
    const before = srv.of('complete', hog.attemptId).length;
    await startAgent();
    await until('the outcome again', () => srv.of('complete', hog.attemptId).length > before);
    const again = srv.of('complete', hog.attemptId).at(-1)!;
    expect(again.body.end).toEqual({
      kind: 'oom-killed',
      detail: expect.stringMatching(
        /^out of memory: the attempt reached its memory limit of 96 MiB \(limits\.memory\) and the kernel killed it \(peak 9\d\.\d MiB\); raise limits\.memory$/,
      ),
    });
    expect(again.body.usage.memoryPeakBytes).toBeGreaterThan(88 * MiB);
  });

  it.skipIf(cannot !== null)('re-attaches after a restart by its cgroups: the end waits for them to empty, and is measured', async () => {
    const first = await startAgent();
    const x = escaping('sleep 1; exit 5');
    const a = assignment({ ...x, limits: limits() });
    srv.push({ assignments: [a] });
    await srv.waitFor((e) => e.type === 'start' && e.attemptId === a.attemptId && e.body.pid !== null);
    await first.stop({ killRunning: false });
    expect(cgroupDirsOf(a.attemptId)).not.toEqual([]);
    await startAgent();
    const done = await completed(a);
    expect(done.body).toMatchObject({ exitCode: 5, end: { kind: 'exited' }, usage: { cpuSeconds: expect.any(Number) } });
    for (const pid of readPids(x.pids)) expect(processGone(pid)).toBe(true);
    await until('settled', async () => (await reported(a.attemptId)) !== null);
    expect(cgroupDirsOf(a.attemptId)).toEqual([]);
  });

  it.skipIf(cannot !== null)(
    "gives an ended attempt's cgroup to the next, journaled, so that a restart re-attaches to it and counts none of the last one's OOM kills",
    async () => {
      const first = await startAgent();
      const hog = assignment({ command: ['python3', '-c', 'b = bytearray(b"x") * (300 * 1024 * 1024)'], limits: limits() });
      srv.push({ assignments: [hog] });
      expect((await completed(hog)).body.end.kind).toBe('oom-killed');
      await until('settled', async () => (await reported(hog.attemptId)) !== null);
      const x = escaping('sleep 1; exit 5');
      const next = assignment({ ...x, limits: limits({ memoryBytes: 96 * MiB }) });
      srv.push({ assignments: [next] });
      await srv.waitFor((e) => e.type === 'start' && e.attemptId === next.attemptId && e.body.pid !== null);
      // It runs in the hog's cgroup (named after it), and the journal says so, with the OOM kill to subtract.
      expect(readAttemptRecords(join(dir, 'data'), next.attemptId)?.cgroup).toMatchObject({ name: hog.attemptId, baseline: { oomKills: 1 } });
      expect(occupiedCgroupsOf(hog.attemptId)).not.toEqual([]);
      await first.stop({ killRunning: false });
      await startAgent();
      // Re-attached by its ref (not swept: its processes lived on until it ended), and not oom-killed.
      expect((await completed(next)).body).toMatchObject({ exitCode: 5, end: { kind: 'exited' }, usage: { cpuSeconds: expect.any(Number) } });
      for (const pid of readPids(x.pids)) expect(processGone(pid)).toBe(true);
      await until('settled', async () => (await reported(next.attemptId)) !== null);
      expect(occupiedCgroupsOf(hog.attemptId)).toEqual([]);
    },
  );

  it.skipIf(cannot !== null)('at start, kills and removes the cgroup of an attempt that ended while no agent watched, and what it left', async () => {
    const first = await startAgent();
    const x = escaping('exec sleep 300');
    const a = assignment({ ...x, limits: limits() });
    srv.push({ assignments: [a] });
    const started = await srv.waitFor((e) => e.type === 'start' && e.attemptId === a.attemptId && e.body.pid !== null);
    await until('both left behind', () => readPids(x.pids).length === 2);
    await first.stop({ killRunning: false });
    // Its process group ends while no agent runs (its launcher, which outlives the agent, writes
    // how): what left the group lives on, in its cgroup only.
    const pid = started.body.pid as number;
    expect(pid).toBeGreaterThan(1);
    process.kill(-pid, 'SIGKILL');
    await until('its status', () => existsSync(new AgentState(join(dir, 'data')).paths(a.attemptId).status));
    // Gone whole, so that the next start finds it ended rather than re-attaching to what is left of its group.
    await until('its group gone', () => !processGroupAlive(pid));
    await startAgent();
    expect((await completed(a)).body).toMatchObject({ exitCode: null, signal: 'SIGKILL', end: { kind: 'signaled' } });
    for (const p of readPids(x.pids)) expect(processGone(p), `pid ${p}`).toBe(true);
    expect(cgroupDirsOf(a.attemptId)).toEqual([]);
    expect(
      lines.some((l) => l.includes(`removed the cgroups of 1 attempt(s) no longer running (${a.attemptId})`)),
      lines.join('\n'),
    ).toBe(true);
  });

  it.skipIf(cannot !== null)('an agent gone for good leaves a subtree that removeAgentCgroups kills and removes', async () => {
    const first = await startAgent();
    const x = escaping('exec sleep 300');
    const a = assignment({ ...x, limits: limits() });
    srv.push({ assignments: [a] });
    await until('both left behind', () => readPids(x.pids).length === 2);
    await first.stop({ killRunning: false });
    expect(cgroupDirsOf(a.attemptId)).not.toEqual([]);
    expect(await removeAgentCgroups(machine.name, join(dir, 'data'))).toEqual({ removed: [a.attemptId], failed: [] });
    for (const p of readPids(x.pids)) expect(processGone(p), `pid ${p}`).toBe(true);
    expect(cgroupDirsOf(a.attemptId)).toEqual([]);
    const d = detectCgroups('/');
    const owns = [...(d.v2 ? [d.v2.own] : []), ...[...d.v1.values()].map((h) => h.own)];
    expect(owns.flatMap((own) => readdirSync(own).filter((sub) => sub.startsWith(`gantry-${machine.name}.`)))).toEqual([]);
  });
});

describe('an agent on a host that offers no cgroups', () => {
  /** A host root whose /proc lists no cgroup hierarchy. */
  function bareHost(): string {
    const root = join(dir, 'host');
    for (const [f, text] of [
      ['proc/self/mountinfo', '27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n'],
      ['proc/self/cgroup', '0::/\n'],
    ] as const) {
      mkdirSync(join(root, f, '..'), { recursive: true });
      writeFileSync(join(root, f), text);
    }
    return root;
  }

  it('says what it cannot enforce, registers it, and still runs stages', async () => {
    await startAgent({ hostRoot: bareHost() });
    const reg = await srv.waitFor((e) => e.type === 'register');
    expect(reg.body.agent.containment).toMatchObject({ mechanism: 'none', memory: false, cpu: false, pids: false, devices: false, kill: 'process-group' });
    expect(reg.body.agent.containment.problems).toContainEqual(expect.stringMatching(/^memory is not limited/));
    expect(reg.body.agent.containment).not.toHaveProperty('favordynmods');
    expect(lines).toContainEqual(
      expect.stringMatching(
        new RegExp(`^agent ${machine.name}: containment none: nothing enforced; attempts killed by process-group; not enforced: memory is not limited`),
      ),
    );
    const a = assignment({ command: ['sh', '-c', 'echo ran'], limits: limits() });
    srv.push({ assignments: [a] });
    const done = await completed(a);
    expect(done.body).toMatchObject({ exitCode: 0, end: { kind: 'exited' } });
    expect(done.body).not.toHaveProperty('usage');
  });

  it('refuses to start when told to require containment, saying what is missing', async () => {
    await expect(startAgent({ mode: 'require', hostRoot: bareHost() })).rejects.toThrow(
      /^containment is required \(--containment require\) but memory, CPU, pids, the kill of every process cannot be enforced on this host: memory is not limited/,
    );
    expect(srv.of('register')).toEqual([]);
  });

  it('contains nothing when containment is off', async () => {
    await startAgent({ mode: 'off' });
    const reg = await srv.waitFor((e) => e.type === 'register');
    // Both halves say so: no cgroups, and the agent's own user for every stage.
    expect(reg.body.agent.containment).toMatchObject({
      mechanism: 'none',
      user: expect.stringMatching(/^agent /),
      problems: [expect.stringMatching(/^containment is off .*no cgroups/), expect.stringMatching(/^containment is off: stages run as the agent's user/)],
    });
    const a = assignment({ limits: limits() });
    srv.push({ assignments: [a] });
    expect((await completed(a)).body).toMatchObject({ exitCode: 0 });
    expect(reg.body.agent.containment).not.toHaveProperty('migIsolated');
    // Its stages join no cgroup: nothing to say about the joins.
    expect(reg.body.agent.containment).not.toHaveProperty('favordynmods');
  });

  const mig = (migCaps: DetectedGpu['migCaps']): DetectedGpu => ({
    index: 100,
    uuid: 'MIG-a',
    name: 'NVIDIA H100 80GB HBM3 MIG 1g.10gb',
    type: 'h100-1g.10gb',
    memoryMiB: 10240,
    deviceMinor: 0,
    migCaps,
  });

  it("says a machine's MIG devices are not isolated, and why, where their capability files are unknown; and starts all the same", async () => {
    await startAgent({ mode: 'off' }, { ...machine, gpus: [mig({ unknown: 'nvidia-smi -q failed' })] });
    const reg = await srv.waitFor((e) => e.type === 'register');
    expect(reg.body.agent.containment.migIsolated).toBe(false);
    const why = 'MIG devices of one GPU are not isolated from each other: nvidia-smi -q failed; an attempt on such a device may open every capability file';
    expect(reg.body.agent.containment.problems).toContain(why);
    expect(lines).toContain(`agent ${machine.name}: ${why}`);
  });

  it('says MIG devices whose capability files are known are still not isolated where neither a devices cgroup nor the sandbox holds an attempt to them', async () => {
    await startAgent({ mode: 'off' }, { ...machine, gpus: [mig({ minors: [12, 13] })] });
    const reg = await srv.waitFor((e) => e.type === 'register');
    expect(reg.body.agent.containment).toMatchObject({
      migIsolated: false,
      problems: expect.arrayContaining([
        expect.stringMatching(/^MIG devices of one GPU are not isolated from each other: neither the v1 devices cgroup nor the sandbox/),
      ]),
    });
  });
});

import { spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { api, CLI, gantry as gantryCli, gantryUpForSuite, isTerminal, jobOf, REPO, until } from '../support/gantry-process.js';

/**
 * Issue 27's proof, end to end: `gantry up` (real agents, real cgroups of this machine, real uids),
 * jobs submitted as a user would. Every stage runs in a cgroup of its own as a uid of its own: its
 * memory limit holds (an attempt over it ends oom-killed with its peak, its neighbour untouched), its
 * CPU cap holds, its pids limit stops a fork bomb, nothing it forked survives its end (by pid), and it
 * cannot read the agent's credential, the server's admin token or another attempt's files.
 *
 * Needs root and this machine's cgroups (v1 memory, cpu, pids, freezer; v2 for the kill); says so when it skips.
 */
const root = process.getuid?.() === 0;
const cgroups = existsSync('/sys/fs/cgroup/memory/cgroup.procs') || existsSync('/sys/fs/cgroup/cgroup.controllers');
const why = !root ? 'not root: the agent cannot make cgroups or switch users' : !cgroups ? 'no memory cgroup hierarchy here' : '';
if (why) console.warn(`containment.e2e.test.ts skipped: ${why}`);

const CLUSTER = 'machines:\n  - { name: box-1, cpu: 4, memory: 4Gi }\n';

interface Attempt {
  id: string;
  state: string;
  endKind?: string | null;
  reason: string | null;
  exitCode: number | null;
  memoryPeakBytes?: number | null;
  cpuSeconds?: number | null;
}
interface Stage {
  name: string;
  state: string;
  attempts: Attempt[];
}

/** Whether a process runs (not gone, not a zombie waiting for a reaper). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

describe.skipIf(why !== '')('containment, end to end', () => {
  const gantry = gantryUpForSuite({ cluster: CLUSTER, machines: 1 });
  const submit = async (spec: unknown) => {
    const r = await api(gantry().url, '/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(spec) });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return r.body.id as string;
  };
  const stages = async (id: string) => (await api(gantry().url, `/v1/jobs/${id}`)).body.stages as Stage[];
  const stage = async (id: string, name: string) => (await stages(id)).find((s) => s.name === name)!;
  const log = async (id: string, name: string) => String((await api(gantry().url, `/v1/jobs/${id}/stages/${name}/logs`)).body);
  const ended = (id: string) => until('the job ends', () => jobOf(gantry().url, id), isTerminal, 60_000);
  const once = { retry: { maxAttempts: 1 } };

  it('a stage over its memory ends oom-killed with its peak; the stage beside it is untouched', async () => {
    const id = await submit({
      name: 'oom',
      stages: [
        {
          name: 'hog',
          ...once,
          resources: { cpu: 0.5, memory: '64Mi' },
          command: ['python3', '-c', 'import time\nb = b"x" * (300 * 2**20)\nprint("allocated", len(b))'],
        },
        { name: 'neighbour', ...once, resources: { cpu: 0.5, memory: '64Mi' }, command: ['sh', '-c', 'sleep 2; echo fine'] },
      ],
    });
    const job = await ended(id);
    expect(job.state).toBe('failed');
    const hog = await stage(id, 'hog');
    const a = hog.attempts[0]!;
    expect(a.endKind).toBe('oom-killed');
    expect(a.reason).toMatch(/memory limit of 64 MiB/);
    expect(a.reason).toMatch(/resources\.memory/);
    expect(a.memoryPeakBytes).toBeGreaterThan(48 * 2 ** 20);
    expect(a.memoryPeakBytes).toBeLessThanOrEqual(64 * 2 ** 20);
    expect(await log(id, 'hog')).not.toContain('allocated');
    const n = await stage(id, 'neighbour');
    expect(n.state).toBe('succeeded');
    expect(await log(id, 'neighbour')).toBe('fine\n');
    // `gantry status` says it too, and names the request to raise.
    const out = await gantryCli(['status', id, '--server', gantry().url]);
    expect(out.stdout).toMatch(/oom-killed/);
    expect(out.stdout).toMatch(/peak \d/);
  });

  /** A stage that leaves a setsid child and a double-forked daemon, and prints their pids. */
  const escaper = (extra: Record<string, unknown> = {}) => ({
    name: 'escape',
    ...once,
    ...extra,
    command: ['sh', '-c', 'setsid sleep 313 & echo "setsid $!"; sh -c \'sleep 314 & echo "daemon $!"\'; echo ready; sleep 600'],
  });
  const pidsOf = async (id: string) => {
    const text = await until(
      'the escaper is ready',
      () => log(id, 'escape'),
      (l) => l.includes('ready'),
      30_000,
    );
    const pids = [...text.matchAll(/(?:setsid|daemon) (\d+)/g)].map((m) => Number(m[1]));
    expect(pids).toHaveLength(2);
    for (const pid of pids) expect(running(pid), `pid ${pid} runs before the end`).toBe(true);
    return pids;
  };
  const allGone = async (pids: number[]) => {
    await until(
      'every process gone',
      async () => pids.filter(running),
      (left) => left.length === 0,
      10_000,
    );
  };

  it('nothing it forked survives a cancel', async () => {
    const id = await submit({ name: 'cancel-all', stages: [escaper()] });
    const pids = await pidsOf(id);
    expect((await api(gantry().url, `/v1/jobs/${id}/cancel`, { method: 'POST' })).status).toBe(200);
    await ended(id);
    await allGone(pids);
  });

  it('nothing it forked survives a timeout', async () => {
    const id = await submit({ name: 'timeout-all', stages: [escaper({ timeoutSeconds: 3 })] });
    const pids = await pidsOf(id);
    const job = await ended(id);
    expect(job.state).toBe('failed');
    expect((await stage(id, 'escape')).attempts[0]!.endKind).toBe('timeout');
    await allGone(pids);
  });

  it('nothing it forked survives its leader exiting', async () => {
    const id = await submit({
      name: 'exit-all',
      stages: [{ ...escaper(), command: ['sh', '-c', 'setsid sleep 313 & echo "setsid $!"; sh -c \'sleep 314 & echo "daemon $!"\'; echo ready'] }],
    });
    const job = await ended(id);
    expect(job.state).toBe('succeeded');
    const pids = [...(await log(id, 'escape')).matchAll(/(?:setsid|daemon) (\d+)/g)].map((m) => Number(m[1]));
    expect(pids).toHaveLength(2);
    await allGone(pids);
  });

  it('limits.cpu 0.5: a busy loop gets about half a CPU', async () => {
    const spin = 'import os, time\nend = time.time() + 4\nwhile time.time() < end: pass\nt = os.times()\nprint("cpu", t.user + t.system)';
    const id = await submit({
      name: 'cpu-cap',
      stages: [{ name: 'spin', ...once, resources: { cpu: 0.5, memory: '64Mi' }, limits: { cpu: 0.5 }, command: ['python3', '-c', spin] }],
    });
    expect((await ended(id)).state).toBe('succeeded');
    const used = Number(/cpu ([\d.]+)/.exec(await log(id, 'spin'))![1]);
    // 4 s of wall time at half a CPU: 2 s, with room for a shared, noisy machine.
    expect(used).toBeGreaterThan(1.2);
    expect(used).toBeLessThan(2.8);
    const a = (await stage(id, 'spin')).attempts[0]!;
    expect(a.cpuSeconds).toBeGreaterThan(1.2);
    expect(a.cpuSeconds).toBeLessThan(3);
  });

  it('a fork bomb stops at the pids limit, and nothing of it is left', async () => {
    const bomb = 'i=0; while [ $i -lt 300 ]; do sleep 60 & i=$((i+1)); done; echo "started all"';
    const id = await submit({
      name: 'bomb',
      stages: [{ name: 'bomb', ...once, resources: { cpu: 0.5, memory: '256Mi' }, limits: { pids: 64 }, command: ['sh', '-c', bomb] }],
    });
    const job = await ended(id);
    const text = await log(id, 'bomb');
    expect(text).not.toContain('started all');
    expect(text).toMatch(/fork|Resource temporarily unavailable/i);
    expect(job.state).toBe('failed');
  });

  it('a stage runs as a uid of its own and cannot read the credential, the admin token or another attempt', async () => {
    const holder = await submit({
      name: 'holder',
      stages: [{ name: 'hold', ...once, command: ['sh', '-c', 'echo secret-of-alpha > mine.txt; echo ready; sleep 600'] }],
    });
    await until(
      'the holder runs',
      () => log(holder, 'hold'),
      (l) => l.includes('ready'),
      30_000,
    );
    const other = (await stage(holder, 'hold')).attempts[0]!.id;
    const agentDir = join(gantry().dataDir, 'agents', 'box-1');
    const probe = [
      'echo "uid $(id -u)"',
      `cat ${join(agentDir, 'credential')} 2>&1 | sed 's/^/credential: /'`,
      `cat ${join(gantry().dataDir, 'admin.token')} 2>&1 | sed 's/^/admin: /'`,
      `cat ${join(agentDir, 'attempts', other, 'work', 'mine.txt')} 2>&1 | sed 's/^/other: /'`,
      `ls ${join(agentDir, 'attempts')} 2>&1 | sed 's/^/list: /'`,
    ].join('; ');
    const id = await submit({ name: 'snoop', stages: [{ name: 'snoop', ...once, command: ['sh', '-c', probe] }] });
    expect((await ended(id)).state).toBe('succeeded');
    const text = await log(id, 'snoop');
    const uid = Number(/uid (\d+)/.exec(text)![1]);
    expect(uid).toBeGreaterThanOrEqual(61184);
    for (const what of ['credential', 'admin', 'other', 'list']) expect(text).toMatch(new RegExp(`${what}: .*Permission denied`));
    expect(text).not.toContain('secret-of-alpha');
    expect(text).not.toMatch(/gantry_(admin|machine)/);
    await api(gantry().url, `/v1/jobs/${holder}/cancel`, { method: 'POST' });
    await ended(holder);
  });

  it('gantry machines shows what the machine enforces', async () => {
    const r = await api(gantry().url, '/v1/machines');
    const c = r.body.machines[0].containment;
    expect(c).toMatchObject({ memory: true, cpu: true, pids: true });
    expect(['cgroup-hybrid', 'cgroup-v1', 'cgroup-v2']).toContain(c.mechanism);
    expect(c.user).toMatch(/^dynamic /);
  });
});

/** An agent that cannot contain (not root: no cgroups, no other user) says so, and still runs stages. */
describe.skipIf(!root)('an agent that cannot contain', () => {
  // Its own machine is cordoned: the stage can only go to the plain agent.
  const gantry = gantryUpForSuite({ cluster: 'machines:\n  - { name: cordoned-1, cpu: 1, memory: 1Gi }\n', machines: 1 });
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('runs as a plain user: says what it cannot enforce, in its log and in gantry machines, and runs the stage', async () => {
    const uid = 61184 + 1000;
    const dir = mkdtempSync(join(tmpdir(), 'gantry-uncontained-'));
    dirs.push(dir);
    chmodSync(dir, 0o755);
    chownSync(dir, uid, uid);
    const joinToken = readFileSync(join(gantry().dataDir, 'join.token'), 'utf8').trim();
    const agent = spawn(
      '/usr/bin/setpriv',
      [
        `--reuid=${uid}`,
        `--regid=${uid}`,
        '--clear-groups',
        process.execPath,
        CLI,
        'agent',
        '--server',
        gantry().url,
        '--token',
        joinToken,
        '--name',
        'plain-1',
        '--data-dir',
        join(dir, 'agent'),
        '--cpu',
        '1',
        '--memory',
        '1Gi',
      ],
      { cwd: REPO, env: { ...process.env, HOME: dir }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    agent.stdout.on('data', (d) => (out += d));
    agent.stderr.on('data', (d) => (out += d));
    try {
      expect((await api(gantry().url, '/v1/machines/cordoned-1/cordon', { method: 'POST' })).status).toBe(200);
      const machines = await until(
        'the plain agent joins',
        () => api(gantry().url, '/v1/machines'),
        (r) => r.body.machines?.length === 2,
      );
      const c = machines.body.machines.find((m: { name: string }) => m.name === 'plain-1').containment;
      expect(c.user).toMatch(/^agent /);
      expect(c.problems.length).toBeGreaterThan(0);
      await until(
        'the plain agent says what it cannot enforce',
        async () => out,
        (o) => /not root/.test(o),
      );
      const r = await api(gantry().url, '/v1/jobs', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'plain', stages: [{ name: 'say', command: ['sh', '-c', 'echo "uid $(id -u)"'] }] }),
      });
      const job = await until('the job ends', () => jobOf(gantry().url, r.body.id), isTerminal, 30_000);
      expect(job.state, out).toBe('succeeded');
      expect(String((await api(gantry().url, `/v1/jobs/${r.body.id}/stages/say/logs`)).body)).toBe(`uid ${uid}\n`);
    } finally {
      agent.kill('SIGINT');
      agent.kill('SIGINT');
    }
  });
});

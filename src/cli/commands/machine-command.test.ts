import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { MachineView } from '../../api/contract/job-view.js';
import { hybridReport } from '../../../test/support/containment-report.js';
import type { CliIo } from '../render/cli-io.js';
import { ExitCode } from './exit-codes.js';
import { runMachineAction, runMachineShow } from './machine-command.js';

const machine = (scheduling: MachineView['scheduling'], attempts: number, over: Partial<MachineView> = {}): MachineView => ({
  id: 'm_1',
  name: 'gpu-1',
  health: 'ready',
  scheduling,
  cpuMillis: 8000,
  memoryBytes: 2 ** 34,
  gpus: [],
  gpusDeclared: false,
  region: null,
  labels: {},
  allocated: { cpuMillis: 1000 * attempts, memoryBytes: 0, gpuIndices: [], attempts },
  lastHeartbeatAt: 0,
  registeredAt: 0,
  ...over,
});

/** A fake Gantry: the action route answers `action`; GET /v1/machines/m_1 answers the next of `polls` (the last repeats). */
async function fakeGantry(action: { status: number; body: unknown }, polls: MachineView[] = []) {
  const calls: string[] = [];
  const server = createServer((req, res) => {
    calls.push(`${req.method} ${req.url}`);
    const next = req.method === 'GET' ? { status: 200, body: polls.length > 1 ? polls.shift() : polls[0] } : action;
    res.writeHead(next.status, { 'content-type': 'application/json' }).end(JSON.stringify(next.body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, calls };
}
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((c) => c()));
});

function io(): { io: CliIo; out: string[]; err: string[] } {
  const out: string[] = [];
  const err: string[] = [];
  return { io: { stdout: { write: (s: string) => out.push(s) }, stderr: { write: (s: string) => err.push(s) }, color: false }, out, err };
}

describe('gantry machine', () => {
  it('cordon: says what happened, or that nothing needed to', async () => {
    const g = await fakeGantry({ status: 200, body: { changed: true, machine: machine('cordoned', 2) } });
    const t = io();
    expect(await runMachineAction('cordon', 'gpu-1', { server: g.url }, t.io)).toBe(ExitCode.ok);
    expect(t.out.join('')).toBe('cordoned gpu-1: no new work is placed there; 2 attempts there go on\n');
    expect(g.calls).toEqual(['POST /v1/machines/gpu-1/cordon']);
    const again = await fakeGantry({ status: 200, body: { changed: false, machine: machine('draining', 1) } });
    const t2 = io();
    await runMachineAction('cordon', 'gpu-1', { server: again.url }, t2.io);
    expect(t2.out.join('')).toBe('gpu-1 is draining: it already takes no new work\n');
  });

  it('drain --now: asks the server to stop what runs there, and says how many went back to the queue', async () => {
    const g = await fakeGantry({ status: 200, body: { changed: true, machine: machine('draining', 2), stopped: 2 } });
    const t = io();
    expect(await runMachineAction('drain', 'gpu-1', { server: g.url, now: true }, t.io)).toBe(ExitCode.ok);
    expect(g.calls).toEqual(['POST /v1/machines/gpu-1/drain?now=true']);
    expect(t.out.join('')).toBe('draining gpu-1: no new work; 2 attempts still there (2 attempts stopped, back in the queue; its agent kills them)\n');
  });

  it("remove: a refusal exits 2 with the server's reason; a removal of a heartbeating machine warns that its agent comes back", async () => {
    const message = 'machine gpu-1 is ready and in service; only a lost machine, or a cordoned or drained one with nothing running, can be removed';
    const refused = await fakeGantry({ status: 409, body: { error: 'conflict', message } });
    const t = io();
    expect(await runMachineAction('remove', 'gpu-1', { server: refused.url }, t.io)).toBe(ExitCode.usage);
    expect(t.err.join('')).toBe(`gantry: ${message}\n`);
    expect(refused.calls).toEqual(['DELETE /v1/machines/gpu-1']);
    const done = await fakeGantry({ status: 200, body: { changed: true, machine: machine('removed', 0) } });
    const t2 = io();
    expect(await runMachineAction('remove', 'gpu-1', { server: done.url }, t2.io)).toBe(ExitCode.ok);
    expect(t2.out.join('')).toBe('removed gpu-1 (it was ready); jobs that ran there still name it\n');
    expect(t2.err.join('')).toMatch(/if its agent still runs, it registers the machine again/);
  });

  it('drain --wait: a line each time the count changes, then drained (exit 0)', async () => {
    const g = await fakeGantry({ status: 200, body: { changed: true, machine: machine('draining', 2) } }, [
      machine('draining', 2),
      machine('draining', 1),
      machine('drained', 0),
    ]);
    const t = io();
    expect(await runMachineAction('drain', 'gpu-1', { server: g.url, wait: true, interval: 5 }, t.io)).toBe(ExitCode.ok);
    expect(t.out.join('')).toMatch(
      /^draining gpu-1: no new work; 2 attempts still there\ndraining gpu-1: 2 attempts left, 00:00\ndraining gpu-1: 1 attempt left, 00:00\ngpu-1 is drained: nothing runs there\n$/,
    );
    expect(g.calls.slice(0, 2)).toEqual(['POST /v1/machines/gpu-1/drain', 'GET /v1/machines/m_1']);
  });

  it('drain --wait: exit 1 when someone uncordons it meanwhile; --json prints the last view', async () => {
    const g = await fakeGantry({ status: 200, body: { changed: true, machine: machine('draining', 1) } }, [machine('eligible', 1)]);
    const t = io();
    expect(await runMachineAction('drain', 'gpu-1', { server: g.url, wait: true, interval: 5, json: true }, t.io)).toBe(ExitCode.failed);
    expect(JSON.parse(t.out.join(''))).toMatchObject({ changed: true, machine: { scheduling: 'eligible' } });
    expect(t.err.join('')).toBe('gantry: gpu-1 is no longer draining (now eligible)\n');
  });

  it('show: the machine in full, with every field of its containment; --json the whole view; an unknown machine exits 4', async () => {
    const containment = {
      ...hybridReport,
      sandbox: 'bwrap' as const,
      problems: ['devices: the v1 devices hierarchy is not mounted', 'cpu: no cpu.max on v2, capped through v1'],
      gpuSharing: 'mps' as const,
      favordynmods: false,
    };
    const shown = machine('eligible', 1, { region: 'eu-west', labels: { rack: 'a' }, containment, lastHeartbeatAt: 1_000, registeredAt: 0 });
    const g = await fakeGantry({ status: 500, body: {} }, [shown]);
    const t = io();
    expect(await runMachineShow('gpu-1', { server: g.url }, { ...t.io, now: () => 3_000 })).toBe(ExitCode.ok);
    expect(g.calls).toEqual(['GET /v1/machines/gpu-1']);
    const out = t.out.join('');
    expect(out).toMatch(/^machine: +gpu-1 +m_1$/m);
    expect(out).toMatch(/^status: +ready$/m);
    // Not autoscaled: no line for it.
    expect(out).not.toMatch(/^autoscaled:/m);
    expect(out).toMatch(/^cpu: +1\/8 allocated$/m);
    expect(out).toMatch(/^labels: +rack=a$/m);
    expect(out).toMatch(/^heartbeat: +2s ago$/m);
    expect(out).toMatch(/^containment$/m);
    for (const line of [
      /^ {2}mechanism: +cgroup-hybrid$/m,
      /^ {2}memory: +yes$/m,
      /^ {2}cpu: +yes$/m,
      /^ {2}pids: +yes$/m,
      /^ {2}devices: +no$/m,
      /^ {2}kill: +cgroup\.kill$/m,
      /^ {2}user: +dynamic 61184-65519$/m,
      /^ {2}sandbox: +bwrap$/m,
      /^ {2}gpu sharing: +mps \(each share's threads and memory bounded by NVIDIA MPS\)$/m,
      /^ {2}cgroup joins: +each burst's first waits for an RCU grace period, ~8 ms \(no favordynmods: see problems\)$/m,
      /^ {2}problems: +devices: the v1 devices hierarchy is not mounted\n {2} +cpu: no cpu\.max on v2, capped through v1$/m,
    ])
      expect(out).toMatch(line);

    const j = io();
    expect(await runMachineShow('gpu-1', { server: g.url, json: true }, j.io)).toBe(ExitCode.ok);
    expect(JSON.parse(j.out.join(''))).toEqual(shown);

    // A machine the autoscaler started: its pool and lifecycle.
    const scaled = await fakeGantry({ status: 500, body: {} }, [machine('draining', 0, { pool: 'h100', lifecycle: 'draining' })]);
    const sc = io();
    await runMachineShow('gpu-1', { server: scaled.url }, sc.io);
    expect(sc.out.join('')).toMatch(/^autoscaled: +pool h100, draining$/m);

    // An agent before containment, and one that contains nothing, said plainly.
    const older = await fakeGantry({ status: 500, body: {} }, [machine('eligible', 0, { containment: null })]);
    const o = io();
    await runMachineShow('gpu-1', { server: older.url }, o.io);
    expect(o.out.join('')).toMatch(/^ {2} +not reported: its agent predates containment/m);
    const bare = {
      ...containment,
      mechanism: 'none' as const,
      memory: false,
      cpu: false,
      pids: false,
      kill: 'process-group' as const,
      user: 'agent root (0)',
      sandbox: null,
      problems: [],
      gpuSharing: 'time-slicing' as const,
    };
    const none = await fakeGantry({ status: 500, body: {} }, [machine('eligible', 0, { containment: bare })]);
    const n = io();
    await runMachineShow('gpu-1', { server: none.url }, n.io);
    expect(n.out.join('')).toMatch(/^ {2}kill: +process-group \(a child that leaves the group escapes\)$/m);
    expect(n.out.join('')).toMatch(/^ {2}user: +agent root \(0\) \(stages can read the agent's files\)$/m);
    expect(n.out.join('')).toMatch(/^ {2}problems: +none$/m);
    expect(n.out.join('')).toMatch(/^ {2}gpu sharing: +time-slicing \(shares of a GPU are not bounded: each can use all of it\)$/m);
    // An agent before shares does not say.
    const unsaid = await fakeGantry({ status: 500, body: {} }, [machine('eligible', 0, { containment: hybridReport })]);
    const u = io();
    await runMachineShow('gpu-1', { server: unsaid.url }, u.io);
    expect(u.out.join('')).toMatch(/^ {2}gpu sharing: +not reported \(its agent predates shares\)$/m);

    const missing = createServer((_req, res) =>
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'not_found', message: 'machine nope not found' })),
    );
    await new Promise<void>((r) => missing.listen(0, '127.0.0.1', r));
    closers.push(() => new Promise<void>((r) => missing.close(() => r())));
    const m = io();
    expect(await runMachineShow('nope', { server: `http://127.0.0.1:${(missing.address() as AddressInfo).port}` }, m.io)).toBe(ExitCode.notFound);
    expect(m.err.join('')).toBe('gantry: machine nope not found\n');
  });
});

/**
 * The attempt runner through its transitions on a fake clock: the process, the reporter, the
 * server's client and the launch are stand-ins the test drives by hand (no process runs, nothing
 * sleeps); only the attempt's directory and journal are real files.
 */
import { appendFileSync, existsSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AgentSettings, AssignmentWire, CompletedItem, LogPiece, ReportItemResult } from '../../api/contract/agent-protocol.js';
import { AgentState } from '../disk/agent-state.js';
import { EXIT_UNKNOWN, type ProcessHandle, type ProcessResult } from './process-runner.js';
import type { AttemptPhase } from './attempt-phase.js';
import { AttemptRunner, type RunnerDeps } from './attempt-runner.js';

function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

/** A process the test ends by hand; a kill ends it as the real runners do (the first reason wins). */
class FakeProcess implements ProcessHandle {
  pid: number | null = null;
  readonly startedAt = deferred<number | null>();
  readonly doneAt = deferred<ProcessResult>();
  readonly kills: { why: string; graceMs?: number }[] = [];
  left = false;
  get started() {
    return this.startedAt.promise;
  }
  get done() {
    return this.doneAt.promise;
  }
  start(pid: number | null): void {
    this.pid = pid;
    this.startedAt.resolve(pid);
  }
  end(r: ProcessResult): void {
    this.doneAt.resolve(r);
  }
  kill(why: string, graceMs?: number): Promise<void> {
    this.kills.push({ why, ...(graceMs !== undefined ? { graceMs } : {}) });
    this.end({ kind: 'killed', exitCode: null, signal: 'SIGTERM', reason: `killed: ${why}` });
    return this.done.then(() => undefined);
  }
  leave(): void {
    this.left = true;
  }
}

/** A report item's answer, less the attempt it is for. */
type Answer = Omit<ReportItemResult, 'attemptId'>;

/** The reporter's three items, each answered when the test says (or at once, by a default). */
class FakeReporter {
  acks: string[] = [];
  pids: number[] = [];
  completes: CompletedItem[] = [];
  ack: () => Promise<Answer> = async () => ({ result: 'ok' });
  pid: () => Promise<Answer | null> = async () => ({ result: 'ok' });
  complete: (item: CompletedItem) => Promise<Answer> = async () => ({ result: 'ok', jobState: 'succeeded' });
  readonly api = {
    acknowledge: (attemptId: string, _token: number, signal?: AbortSignal) => {
      this.acks.push(attemptId);
      if (signal?.aborted) return Promise.reject(Object.assign(new Error('withdrawn'), { name: 'AbortError' }));
      return this.ack().then((r) => ({ attemptId, ...r }));
    },
    recordPid: (attemptId: string, _token: number, pid: number) => {
      this.pids.push(pid);
      return this.pid().then((r) => (r ? { attemptId, ...r } : null));
    },
    complete: (item: CompletedItem) => {
      this.completes.push(item);
      return this.complete(item).then((r) => ({ attemptId: item.attemptId, ...r }));
    },
  };
}

const unreachable = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });

let n = 0;
function assignment(over: Partial<AssignmentWire> = {}): AssignmentWire {
  n++;
  return {
    attemptId: `att_r${n}`,
    token: 3,
    jobId: 'job_1',
    stageName: 'train',
    attemptNumber: 1,
    command: ['x'],
    env: {},
    gpuIndices: [],
    timeoutSeconds: null,
    inputs: [],
    ...over,
  };
}

let dir: string;
let state: AgentState;
let clock: number;
let reporter: FakeReporter;
let procs: FakeProcess[];
let attached: { pid: number; timeout: { seconds: number; remainingMs: number } | null }[];
let lines: string[];
let halt: AbortController;
let settings: AgentSettings;
/** The attempts whose user was released (attempt-users.ts), in order. */
let released: string[];
const GIVE_UP_MS = 60_000;

function deps(): RunnerDeps {
  return {
    client: {
      downloadInputs: async () => {},
      logs: async () => ({ stdout: 0, stderr: 0, capped: false }),
      uploadOutputs: async () => [],
    },
    reporter: reporter.api,
    state,
    launch: async () => {
      const p = new FakeProcess();
      procs.push(p);
      return { handle: p, progress: null, cgroup: null };
    },
    attach: (pid, _paths, timeout) => {
      attached.push({ pid, timeout });
      const p = new FakeProcess();
      p.start(pid);
      procs.push(p);
      return p;
    },
    openCgroup: () => null,
    releaseCgroup: async () => {},
    groupAlive: () => true,
    now: () => clock,
    settings: () => settings,
    halt: halt.signal,
    log: (l) => lines.push(l),
    debug: () => {},
    giveUpMs: GIVE_UP_MS,
    users: { adopt: () => null, release: (id) => void released.push(id) },
  };
}

/**
 * Lets the runner's promises and its journal writes go on until `cond` holds (no time passes). The
 * bound is in turns of the event loop, not time: an exit record's fdatasync on a loaded machine
 * (two cores, a dozen runnable processes) was seen to take over 2,000 of them.
 */
async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 50_000 && !cond(); i++) await new Promise((r) => setImmediate(r));
  expect(cond()).toBe(true);
}

/** Every phase a runner goes through from now on. */
function watch(r: AttemptRunner): AttemptPhase[] {
  const seen: AttemptPhase[] = [r.phase];
  r.onMove((to) => seen.push(to));
  return seen;
}

/** A runner whose process exited 0 and whose outcome's first try met an outage. */
async function owedInOutage(): Promise<AttemptRunner> {
  reporter.complete = () => Promise.reject(unreachable());
  const r = AttemptRunner.accept(assignment(), deps());
  await until(() => procs.length === 1);
  procs[0]!.start(6);
  procs[0]!.end({ kind: 'exited', exitCode: 0, signal: null, reason: null });
  await until(() => r.phase === 'owed' && reporter.completes.length === 1);
  return r;
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-runner-'));
  state = new AgentState(dir);
  await state.init();
  clock = 1_000_000;
  reporter = new FakeReporter();
  procs = [];
  attached = [];
  lines = [];
  released = [];
  halt = new AbortController();
  settings = { heartbeatMs: 500, leaseMs: 5000, killGraceMs: 300, protocol: 2 };
});

afterEach(async () => {
  halt.abort();
  await rm(dir, { recursive: true, force: true });
});

describe('AttemptRunner', () => {
  it('goes from its assignment to its delivered outcome, with its typed end', async () => {
    const r = AttemptRunner.accept(assignment(), deps());
    const seen = watch(r);
    await until(() => procs.length === 1);
    expect(r.phase).toBe('starting');
    expect(r.listed).toBe(true);
    procs[0]!.start(4242);
    await until(() => r.phase === 'running');
    expect(reporter.pids).toEqual([4242]);
    clock += 1500;
    procs[0]!.end({ kind: 'exited', exitCode: 0, signal: null, reason: null });
    expect(await r.done).toEqual({ phase: 'delivered' });
    expect(seen).toEqual(['accepted', 'acknowledging', 'starting', 'running', 'ended', 'owed', 'shipping-log', 'reporting', 'delivered']);
    expect(reporter.completes[0]).toMatchObject({ exitCode: 0, reason: null, end: { kind: 'exited', detail: null } });
    expect(await state.readReported(r.a.attemptId)).toMatchObject({ result: 'accepted', jobState: 'succeeded' });
    // Settled: its user goes back, once.
    expect(released).toEqual([r.a.attemptId]);
    expect((await state.readExit(r.a.attemptId))!.finishedAt).toBe(new Date(clock).toISOString());
    expect(r.listed).toBe(false);
  });

  it('killed while starting: the kill waits for the pid, then nothing is reported', async () => {
    const r = AttemptRunner.accept(assignment(), deps());
    const seen = watch(r);
    await until(() => procs.length === 1);
    r.kill({ kind: 'killed-by-server', detail: 'canceled' }, 1000);
    expect(r.phase).toBe('killing');
    // Still listed: the server keeps its resources until its process is gone.
    expect(r.listed).toBe(true);
    expect(r.live).toBe(false);
    procs[0]!.start(77);
    expect(await r.done).toEqual({ phase: 'dropped' });
    expect(procs[0]!.kills).toEqual([{ why: 'canceled', graceMs: 1000 }]);
    expect(seen).toEqual(['accepted', 'acknowledging', 'starting', 'killing', 'ended', 'dropped']);
    expect(reporter.pids).toEqual([]);
    expect(reporter.completes).toEqual([]);
    expect(await state.readExit(r.a.attemptId)).toMatchObject({ kind: 'killed', dropped: 'canceled' });
    expect(await state.readReported(r.a.attemptId)).toMatchObject({ result: 'dropped', note: 'canceled' });
  });

  it('killed before its acknowledgement is answered: nothing runs, and a resend runs anew', async () => {
    const ack = deferred<Answer>();
    reporter.ack = () => ack.promise;
    const r = AttemptRunner.accept(assignment(), deps());
    await until(() => r.phase === 'acknowledging');
    r.kill({ kind: 'killed-by-server', detail: 'canceled' });
    // The reporter rejects a withdrawn item.
    ack.reject(Object.assign(new Error('withdrawn'), { name: 'AbortError' }));
    expect(await r.done).toEqual({ phase: 'forgotten' });
    expect(procs).toEqual([]);
    expect(await state.createAttempt(r.a)).not.toBeNull();
  });

  it('an outage while its outcome is owed: retried after each heartbeat, delivered when the server is back', async () => {
    const r = await owedInOutage();
    // Owed: still listed (its lease renewed), an outcome coming.
    expect(r.listed).toBe(true);
    clock += 10_000;
    await r.deliver();
    expect(r.phase).toBe('owed');
    reporter.complete = async () => ({ result: 'ok', jobState: 'failed' });
    clock += 10_000;
    await r.deliver();
    expect(await r.done).toEqual({ phase: 'delivered' });
    expect(reporter.completes).toHaveLength(3);
    expect(lines.some((l) => l.includes('outcome not delivered yet (connect ECONNREFUSED'))).toBe(true);
  });

  it('an outage while owed that outlasts the give-up time: abandoned, for the server to take as lost', async () => {
    const r = await owedInOutage();
    clock += GIVE_UP_MS;
    await r.deliver();
    expect(r.phase).toBe('owed');
    clock += 1;
    await r.deliver();
    expect(await r.done).toEqual({ phase: 'abandoned' });
    expect(r.listed).toBe(false);
    expect(await state.readReported(r.a.attemptId)).toMatchObject({ result: 'dropped', note: 'outcome undeliverable for 60 s' });
  });

  it('an agent halted while owed leaves the outcome owed, on disk', async () => {
    const r = await owedInOutage();
    halt.abort();
    clock += 10 * GIVE_UP_MS;
    await r.deliver();
    expect(r.phase).toBe('owed');
    expect(reporter.completes).toHaveLength(1);
    expect(await state.readReported(r.a.attemptId)).toBeNull();
  });

  it('restart while running: re-attached with the rest of its timeout, its end reported', async () => {
    const a = assignment({ timeoutSeconds: 10 });
    await state.createAttempt(a);
    const r = AttemptRunner.reattach(a, deps(), 999, state.paths(a.attemptId), clock - 3000);
    expect(r.phase).toBe('running');
    expect(attached).toEqual([{ pid: 999, timeout: { seconds: 10, remainingMs: 7000 } }]);
    expect(r.listed).toBe(true);
    procs[0]!.end({ kind: 'timeout', exitCode: null, signal: 'SIGTERM', reason: 'timeout after 10 s' });
    expect(await r.done).toEqual({ phase: 'delivered' });
    expect(reporter.completes[0]).toMatchObject({ reason: 'timeout after 10 s', end: { kind: 'timeout', detail: 'timeout after 10 s' } });
  });

  it('restart while running, and the shim died too: how it ended is unknown, nothing reported', async () => {
    const a = assignment();
    await state.createAttempt(a);
    const r = AttemptRunner.reattach(a, deps(), 1000, state.paths(a.attemptId));
    procs[0]!.end({ kind: 'unknown', exitCode: null, signal: null, reason: EXIT_UNKNOWN });
    expect(await r.done).toEqual({ phase: 'dropped' });
    expect(reporter.completes).toEqual([]);
    expect(await state.readReported(a.attemptId)).toMatchObject({ result: 'dropped', note: EXIT_UNKNOWN });
  });

  it('the agent stops and leaves it running: left for the next start', async () => {
    const r = AttemptRunner.accept(assignment(), deps());
    await until(() => procs.length === 1);
    procs[0]!.start(12);
    await until(() => r.phase === 'running');
    r.leave();
    expect(await r.done).toEqual({ phase: 'left' });
    expect(procs[0]!.left).toBe(true);
    procs[0]!.end({ kind: 'exited', exitCode: 0, signal: null, reason: null });
    await until(() => reporter.completes.length === 0 && r.phase === 'left');
    expect(reporter.completes).toEqual([]);
    // Its process still runs as its user: the uid stays held for the next start to adopt.
    expect(released).toEqual([]);
  });

  it('the agent stops while its launch is still under way (a contained start waits for its pid): left once the launch returns', async () => {
    const launched = deferred<void>();
    const r = AttemptRunner.accept(assignment(), {
      ...deps(),
      launch: async () => {
        await launched.promise;
        const p = new FakeProcess();
        procs.push(p);
        p.start(13);
        return { handle: p, progress: null, cgroup: null };
      },
    });
    await until(() => r.phase === 'starting');
    r.leave();
    expect(await r.done).toEqual({ phase: 'left' });
    launched.resolve();
    await until(() => procs.length === 1);
    await until(() => procs[0]!.left);
    expect(reporter.completes).toEqual([]);
  });

  it('a timeout is reported as one, with its text as the detail', async () => {
    const r = AttemptRunner.accept(assignment({ timeoutSeconds: 1 }), deps());
    await until(() => procs.length === 1);
    procs[0]!.start(13);
    procs[0]!.end({ kind: 'timeout', exitCode: null, signal: 'SIGTERM', reason: 'timeout after 1 s' });
    expect(await r.done).toEqual({ phase: 'delivered' });
    expect(reporter.completes[0]).toMatchObject({
      exitCode: null,
      signal: 'SIGTERM',
      reason: 'timeout after 1 s',
      end: { kind: 'timeout', detail: 'timeout after 1 s' },
    });
  });

  it('a spawn failure is reported as one, with no pid ever sent', async () => {
    const r = AttemptRunner.accept(assignment(), deps());
    const seen = watch(r);
    await until(() => procs.length === 1);
    procs[0]!.start(null);
    procs[0]!.end({ kind: 'spawn-failed', exitCode: null, signal: null, reason: 'spawn failed: ENOENT: x is not in PATH' });
    expect(await r.done).toEqual({ phase: 'delivered' });
    expect(seen).not.toContain('running');
    expect(reporter.pids).toEqual([]);
    expect(reporter.completes[0]!.end).toEqual({ kind: 'spawn-failed', detail: 'spawn failed: ENOENT: x is not in PATH' });
  });

  it('sends no typed end to a server of protocol 1', async () => {
    delete settings.protocol;
    const r = AttemptRunner.accept(assignment(), deps());
    await until(() => procs.length === 1);
    procs[0]!.start(14);
    procs[0]!.end({ kind: 'exited', exitCode: 2, signal: null, reason: null });
    await r.done;
    expect(reporter.completes[0]).toMatchObject({ exitCode: 2, reason: null });
    expect(reporter.completes[0]).not.toHaveProperty('end');
  });

  it('a stale answer to its acknowledgement: nothing runs, dropped', async () => {
    reporter.ack = async () => ({ result: 'stale', message: 'canceled' });
    const r = AttemptRunner.accept(assignment(), deps());
    expect(await r.done).toEqual({ phase: 'dropped' });
    expect(procs).toEqual([]);
    expect(await state.readReported(r.a.attemptId)).toMatchObject({ result: 'dropped', note: 'stale: canceled' });
  });

  it('a stale answer to its pid: killed, nothing reported', async () => {
    reporter.pid = async () => ({ result: 'stale', message: 'placed elsewhere' });
    const r = AttemptRunner.accept(assignment(), deps());
    await until(() => procs.length === 1);
    procs[0]!.start(15);
    expect(await r.done).toEqual({ phase: 'dropped' });
    expect(r.dropped).toEqual({ kind: 'stale', detail: 'stale: placed elsewhere' });
    expect(procs[0]!.kills).toEqual([{ why: 'stale: placed elsewhere' }]);
    expect(reporter.completes).toEqual([]);
  });

  it('failed inputs end it without a process, reported as inputs-failed', async () => {
    const d = deps();
    d.client.downloadInputs = () => Promise.reject(new Error('404 no such artifact'));
    const r = AttemptRunner.accept(assignment({ inputs: [{ stage: 'prep', path: 'a.bin', size: 1, sha256: 'x' } as never] }), d);
    expect(await r.done).toEqual({ phase: 'delivered' });
    expect(procs).toEqual([]);
    expect(reporter.completes[0]!.end).toEqual({ kind: 'inputs-failed', detail: 'input download failed: 404 no such artifact' });
  });

  it('killed while owed: settled at once, nothing reported', async () => {
    const r = await owedInOutage();
    r.kill({ kind: 'killed-by-server', detail: 'canceled' });
    expect(await r.done).toEqual({ phase: 'dropped' });
    await r.deliver();
    expect(reporter.completes).toHaveLength(1);
  });
});

/** The server's side of `logs` (docs/agent.md, "Logs"): a piece is taken only at the offset its stream has reached. */
class FakeLogs {
  readonly taken = { stdout: '', stderr: '' };
  private readonly at = { stdout: 0, stderr: 0 };
  /** Thrown instead of an answer: an outage (retryable), or a refusal for good. */
  fail: Error | null = null;
  /** Past this many bytes the head is full: only tail pieces are taken, one past the mark cutting what lies between. */
  headBytes = Infinity;
  readonly tailBytes = 8;
  readonly logs = async (_attemptId: string, _token: number, pieces: LogPiece[]) => {
    if (this.fail) throw this.fail;
    for (const p of pieces) {
      const full = this.at.stdout + this.at.stderr >= this.headBytes;
      if (full && !p.tail) continue;
      if (p.offset !== this.at[p.stream] && !(full && p.offset > this.at[p.stream])) continue;
      if (p.offset > this.at[p.stream]) this.taken[p.stream] += `[cut ${p.offset - this.at[p.stream]}]`;
      this.at[p.stream] = p.offset + p.bytes;
      this.taken[p.stream] += p.data;
    }
    const capped = this.at.stdout + this.at.stderr >= this.headBytes;
    return { ...this.at, capped, ...(capped ? { tailBytes: this.tailBytes } : {}) };
  };
}

describe("AttemptRunner and its log's files", () => {
  /** As until(), but with time for the file reads the log's shipping does (the thread pool, not the event loop alone). */
  async function waitFor(cond: () => boolean): Promise<void> {
    for (let i = 0; i < 1000 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
    expect(cond()).toBe(true);
  }

  /** A runner whose process printed `out` and `err` into its files, then exited 0. */
  async function printedAndExited(d: RunnerDeps, out: string, err: string): Promise<{ r: AttemptRunner; files: string[] }> {
    const r = AttemptRunner.accept(assignment(), d);
    await waitFor(() => procs.length === 1);
    procs[0]!.start(21);
    await waitFor(() => r.phase === 'running');
    const paths = state.paths(r.a.attemptId);
    writeFileSync(paths.stdout, out);
    writeFileSync(paths.stderr, err);
    procs[0]!.end({ kind: 'exited', exitCode: 0, signal: null, reason: null });
    return { r, files: [paths.stdout, paths.stderr] };
  }

  it('removes them once the server has every byte and the outcome is delivered, not before', async () => {
    const server = new FakeLogs();
    const d = deps();
    d.client.logs = server.logs;
    reporter.complete = () => Promise.reject(unreachable());
    const { r, files } = await printedAndExited(d, 'key=SUPERSECRET\n', 'warning\n');
    await waitFor(() => r.phase === 'owed' && reporter.completes.length === 1);
    // The log is shipped, the outcome is not: a restart now would still owe it, so the files stay.
    expect(server.taken).toEqual({ stdout: 'key=SUPERSECRET\n', stderr: 'warning\n' });
    expect(files.map((f) => existsSync(f))).toEqual([true, true]);
    reporter.complete = async () => ({ result: 'ok', jobState: 'succeeded' });
    await r.deliver();
    expect(await r.done).toEqual({ phase: 'delivered' });
    expect(files.map((f) => existsSync(f))).toEqual([false, false]);
  });

  it('keeps them while the server cannot be reached, and removes them once it has them all', async () => {
    const server = new FakeLogs();
    server.fail = unreachable();
    const d = deps();
    d.client.logs = server.logs;
    const { r, files } = await printedAndExited(d, 'a'.repeat(1000), '');
    await waitFor(() => r.phase === 'owed');
    expect(reporter.completes).toEqual([]);
    expect(existsSync(files[0]!)).toBe(true);
    server.fail = null;
    await r.deliver();
    expect(await r.done).toEqual({ phase: 'delivered' });
    expect(server.taken.stdout).toBe('a'.repeat(1000));
    expect(existsSync(files[0]!)).toBe(false);
  });

  it("past the head: ships the tail at the end, sends the files' sizes with the outcome, and removes them (the cut is never shipped)", async () => {
    const server = new FakeLogs();
    server.headBytes = 10;
    const d = deps();
    d.client.logs = server.logs;
    const r = AttemptRunner.accept(assignment(), d);
    await waitFor(() => procs.length === 1);
    procs[0]!.start(21);
    await waitFor(() => r.phase === 'running');
    const paths = state.paths(r.a.attemptId);
    // The head goes while it runs (a follow round); what it prints after goes only as the tail.
    writeFileSync(paths.stdout, 'head......\n');
    await waitFor(() => server.taken.stdout !== '');
    appendFileSync(paths.stdout, 'x'.repeat(100) + 'the end\n');
    writeFileSync(paths.stderr, 'err\n');
    procs[0]!.end({ kind: 'exited', exitCode: 0, signal: null, reason: null });
    expect(await r.done).toEqual({ phase: 'delivered' });
    // Each stream's share of the 8-byte tail: stderr's 4 (all of it), stdout's 4; the 104 bytes between are cut.
    expect(server.taken).toEqual({ stdout: 'head......\n[cut 104]end\n', stderr: 'err\n' });
    expect(reporter.completes[0]).toMatchObject({ logBytes: { stdout: 119, stderr: 4 } });
    expect([paths.stdout, paths.stderr].map((f) => existsSync(f))).toEqual([false, false]);
  });

  it('keeps them when the server refused part of the log for good: the machine has the only copy', async () => {
    const d = deps();
    d.client.logs = () => Promise.reject(new Error('400 bad request: no'));
    const { r, files } = await printedAndExited(d, 'lines the server refused\n', '');
    expect(await r.done).toEqual({ phase: 'delivered' });
    expect(reporter.completes[0]).toMatchObject({ logBytes: { stdout: 25, stderr: 0 } });
    expect(existsSync(files[0]!)).toBe(true);
  });

  it('a killed attempt: removed when its one try shipped them all, kept when it did not', async () => {
    const server = new FakeLogs();
    const d = deps();
    d.client.logs = server.logs;
    for (const reachable of [true, false]) {
      procs = [];
      server.fail = reachable ? null : unreachable();
      const r = AttemptRunner.accept(assignment(), d);
      await waitFor(() => procs.length === 1);
      procs[0]!.start(22);
      await waitFor(() => r.phase === 'running');
      const paths = state.paths(r.a.attemptId);
      writeFileSync(paths.stdout, 'cleaning up\n');
      r.kill({ kind: 'killed-by-server', detail: 'canceled' });
      expect(await r.done).toEqual({ phase: 'dropped' });
      expect(existsSync(paths.stdout), `server reachable: ${reachable}`).toBe(!reachable);
    }
  });
});

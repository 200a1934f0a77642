/**
 * An in-process, clock-driven control plane for protocol tests: the real composition root
 * (createControlPlane: store, bus, API, the loops' passes) on a fake clock, with no loop started.
 * A test moves time with `advance`, runs a pass with `schedule` / `reconcile`, and plays agents
 * through the real agent routes (`app.inject`: register, heartbeat, report), so leases,
 * heartbeats, lost machines, retries and cancels are tested at any timing, with no real sleep.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AssignmentWire, HeartbeatResponse, RegisterResponse, ReportItemResult, ReportResponse } from '../../src/api/contract/agent-protocol.js';
import type { AttemptEnd } from '../../src/api/contract/attempt-end.js';
import type { JobView } from '../../src/api/contract/job-view.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig, type ServerConfig } from '../../src/server/server-config.js';
import { bearer, makeToken } from './tokens.js';

export class FakeClock {
  constructor(public t = 1_800_000_000_000) {}
  now(): number {
    return this.t;
  }
}

export class ProtocolHarness {
  private constructor(
    public cp: ControlPlane,
    readonly clock: FakeClock,
    private readonly dir: string,
    /** The test's own tokens: an admin's for the user routes, a join token for agents. */
    readonly tokens: { admin: string; join: string },
  ) {}

  static async create(over: Partial<ServerConfig> = {}): Promise<ProtocolHarness> {
    const dir = mkdtempSync(join(tmpdir(), 'gantry-protocol-'));
    const clock = new FakeClock();
    // The default timings (seconds): time only moves when the test says.
    const cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, ...over }), { clock, random: () => 0.5, logger: false });
    const tokens = { admin: await makeToken(cp.store, 'admin', { now: clock.now() }), join: await makeToken(cp.store, 'join', { now: clock.now() }) };
    return new ProtocolHarness(cp, clock, dir, tokens);
  }

  get config(): ServerConfig {
    return this.cp.config;
  }

  /** The server stopped and started again on the same data (agents keep talking to it: the same harness). */
  async restart(): Promise<void> {
    const config = this.cp.config;
    await this.cp.stop();
    this.cp = await createControlPlane(config, { clock: this.clock, random: () => 0.5, logger: false });
  }

  advance(ms: number): void {
    this.clock.t += ms;
  }

  /** One scheduler pass, as the loop would run it. */
  schedule(): Promise<void> {
    return this.cp.loops.scheduler.runOnce();
  }

  /** Heartbeats kept in memory written, then one pass of every reconciler duty, in order: suspect
   *  and lost machines, expired leases and unacknowledged assignments, queue timeouts, repair,
   *  pruning, retention. */
  async reconcile(): Promise<void> {
    // Heartbeats kept in memory are written first, as the liveness loop would have by then (every
    // 0.4 of a period); test/protocol/liveness.test.ts runs the loops on their own schedules.
    await this.cp.loops.liveness.runOnce();
    for (const loop of Object.values(this.cp.loops.reconciler)) await loop.runOnce();
  }

  async submit(spec: object): Promise<string> {
    const r = await this.call('POST', '/v1/jobs', spec);
    if (r.statusCode !== 201) throw new Error(`submit: ${r.statusCode} ${r.body}`);
    return (JSON.parse(r.body) as { id: string }).id;
  }

  async job(id: string): Promise<JobView> {
    return JSON.parse((await this.call('GET', `/v1/jobs/${id}`)).body) as JobView;
  }

  async cancel(id: string): Promise<void> {
    const r = await this.call('POST', `/v1/jobs/${id}/cancel`, {});
    if (r.statusCode !== 200) throw new Error(`cancel: ${r.statusCode} ${r.body}`);
  }

  /** `agent`: more of what the agent says of itself (its advertised address, its gang ports). */
  async agent(name: string, cpu = 4, agent: object = {}): Promise<FakeAgent> {
    const r = await this.call(
      'POST',
      '/v1/agent/register',
      {
        name,
        cpuMillis: cpu * 1000,
        memoryBytes: 8 * 2 ** 30,
        gpus: [],
        gpusDeclared: false,
        region: null,
        labels: {},
        agent: { version: 'harness', host: 'harness', pid: 1, ...agent },
      },
      this.tokens.join,
    );
    if (r.statusCode !== 200) throw new Error(`register: ${r.statusCode} ${r.body}`);
    const res = JSON.parse(r.body) as RegisterResponse;
    return new FakeAgent(this, res.machineId, res.credential!, res.settings);
  }

  /** A request with a token: the admin's unless another is given (an agent's credential). */
  call(method: 'GET' | 'POST', url: string, body?: object, token = this.tokens.admin) {
    const headers = { ...bearer(token), ...(body ? { 'content-type': 'application/json' } : {}) };
    return this.cp.app.inject({ method, url, headers, ...(body ? { payload: JSON.stringify(body) } : {}) });
  }

  async close(): Promise<void> {
    await this.cp.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** An agent played by the test: it says what the protocol lets it say, when the test says. */
export class FakeAgent {
  /** Attempts it runs (lists in heartbeats): acknowledged, not yet ended. */
  readonly running = new Map<string, AssignmentWire>();

  constructor(
    private readonly h: ProtocolHarness,
    readonly machineId: string,
    /** The machine's own credential, from its registration. */
    readonly credential: string,
    /** What the registration's answer said (the server's capabilities among them). */
    readonly settings?: RegisterResponse['settings'],
  ) {}

  /** A heartbeat that does not wait: the kill list and new assignments. */
  async heartbeat(): Promise<HeartbeatResponse> {
    const running = [...this.running.values()].map((a) => ({ attemptId: a.attemptId, token: a.token }));
    const r = await this.h.call('POST', `/v1/agent/machines/${this.machineId}/heartbeat`, { running, waitMs: 0 }, this.credential);
    if (r.statusCode !== 200) throw new Error(`heartbeat: ${r.statusCode} ${r.body}`);
    return JSON.parse(r.body) as HeartbeatResponse;
  }

  async report(req: { started?: { attemptId: string; token: number; pid: number | null }[]; completed?: object[] }): Promise<ReportResponse> {
    const r = await this.h.call(
      'POST',
      `/v1/agent/machines/${this.machineId}/report`,
      { started: req.started ?? [], completed: req.completed ?? [] },
      this.credential,
    );
    if (r.statusCode !== 200) throw new Error(`report: ${r.statusCode} ${r.body}`);
    return JSON.parse(r.body) as ReportResponse;
  }

  /** Acknowledges (the attempt becomes running) and starts listing it. */
  async acknowledge(a: AssignmentWire): Promise<ReportItemResult> {
    const r = (await this.report({ started: [{ attemptId: a.attemptId, token: a.token, pid: null }] })).started[0]!;
    if (r.result === 'ok' || r.result === 'duplicate') this.running.set(a.attemptId, a);
    return r;
  }

  /** Reports how it ended and stops listing it: as an agent of protocol 1 (a reason text), or of 2 with `end`. */
  async finish(
    a: AssignmentWire,
    exitCode: number | null,
    extra: { signal?: string | null; reason?: string | null; end?: AttemptEnd } = {},
  ): Promise<ReportItemResult> {
    this.running.delete(a.attemptId);
    const item = {
      attemptId: a.attemptId,
      token: a.token,
      exitCode,
      signal: extra.signal ?? null,
      reason: extra.reason ?? null,
      ...(extra.end ? { end: extra.end } : {}),
      outputs: [],
    };
    return (await this.report({ completed: [item] })).completed[0]!;
  }

  /** Heartbeats until the server hands it work (one pass in between), and acknowledges it all. */
  async takeWork(): Promise<AssignmentWire[]> {
    await this.h.schedule();
    const { assignments } = await this.heartbeat();
    for (const a of assignments) await this.acknowledge(a);
    return assignments;
  }
}

/**
 * One attempt on this agent, from its assignment to its reported end: the only owner of its phase
 * (attempt-phase.ts, one transition table), its process, its kill, its log tail and the delivery of
 * its end. It takes orders from the Agent (`kill`, `deliver`, `leave`) and reports through what it
 * exposes (`done`, `listed`, `heartbeatItem`), never by calling back into the Agent.
 *
 * Who decides an attempt's fate: the agent reports an outcome only for an attempt whose process
 * it saw end on its own (or time out, or fail to start). When the server says kill, or says the
 * attempt is stale (a 409, or a report item answered `stale`), or this agent loses its lease or
 * is stopped, the server has decided or will (it reaps the attempt as lost, which does not count
 * against the user's retries), so the runner kills the process group and reports nothing.
 */
import type { AgentSettings, AssignmentWire, HeartbeatRequest, ReportItemResult } from '../../api/contract/agent-protocol.js';
import { StaleAttempt, type AgentClient } from '../link/agent-client.js';
import type { AgentState, AttemptPaths, ExitRecord, ReportedRecord } from '../disk/agent-state.js';
import type { AttemptUsers } from '../contain/attempt-users.js';
import { dropReason, type DropReason } from './drop-reason.js';
import { crashBeforeReport } from '../fault-hooks.js';
import { LogTail } from './log-tail.js';
import { EXIT_UNKNOWN, type ProcessHandle } from './process-runner.js';
import type { Reporter } from '../link/reporter.js';
import type { ProgressFile } from './stage-progress.js';
import { AttemptPhase, isBeforeProcess, isDelivering, isFinal, mayRun, nextPhase } from './attempt-phase.js';
import { describe, describeExit } from './describe-attempt.js';
import type { Launched } from './launch-attempt.js';
import { deliverOutcome, type DeliveryProgress } from './outcome-delivery.js';
import { errorText } from '../../lib/error-text.js';
import type { AttemptCgroup } from '../contain/attempt-cgroup.js';
import { cgroupEnd, type CgroupEnd } from '../contain/cgroup-end.js';

export interface RunnerDeps {
  client: Pick<AgentClient, 'downloadInputs' | 'logs' | 'uploadOutputs'>;
  reporter: Pick<Reporter, 'acknowledge' | 'recordPid' | 'complete'>;
  state: Pick<AgentState, 'dataDir' | 'createAttempt' | 'removeAttempt' | 'removeLogs' | 'writePid' | 'writeExit' | 'markReported' | 'prune'>;
  /** Starts an acknowledged attempt's process (launch-attempt.ts). */
  launch: (a: AssignmentWire, paths: AttemptPaths) => Promise<Launched>;
  /** Takes over a process the previous run of the agent started (process-runner.ts, attachProcess), by its cgroups where it has them. */
  attach: (pid: number, paths: AttemptPaths, timeout: { seconds: number; remainingMs: number } | null, cgroup: AttemptCgroup | null) => ProcessHandle;
  /** The cgroups a previous run of the agent made for an attempt (CgroupTree.open); null: none. */
  openCgroup: (attemptId: string) => AttemptCgroup | null;
  /** An ended attempt's cgroups, once its exit is durable: kept for the next attempt, or removed (CgroupTree.release). */
  releaseCgroup: (cg: AttemptCgroup) => Promise<void>;
  /** Whether a process group still has a member (process-group.ts). */
  groupAlive: (pgid: number) => boolean;
  now: () => number;
  /** The server's settings as of the last registration. */
  settings: () => AgentSettings;
  /** Aborted when the agent halts: what was not delivered stays on disk for the next start. */
  halt: AbortSignal;
  log: (line: string) => void;
  /** Lines only a verbose agent prints (one per step of every attempt). */
  debug: (line: string) => void;
  /** Past this, an outcome that keeps failing is given up (outcome-delivery.ts). */
  giveUpMs: number;
  /** Who attempts run as (attempt-users.ts): the launch acquires an attempt's user, its runner releases it once settled. */
  users: Pick<AttemptUsers, 'adopt' | 'release'>;
}

/** How a runner ended: the final phase, and the error that cut it short, if one did. */
export interface RunnerEnd {
  phase: AttemptPhase;
  error?: unknown;
}

type ProcessEnd = Omit<ExitRecord, 'finishedAt' | 'attempt' | 'dropped' | 'usage'>;

export class AttemptRunner {
  private current: AttemptPhase = AttemptPhase.accepted;
  /** Why the server no longer wants it (it decided, or will): nothing is reported once set. */
  private why: DropReason | null = null;
  /** With `why`: the time between TERM and KILL the server gave (a preempted attempt's, to checkpoint). */
  private dropGraceMs: number | undefined;
  /** Aborted with `why`: withdraws whatever of this attempt still waits in the reporter. */
  private readonly withdraw = new AbortController();
  private paths: AttemptPaths | null = null;
  private handle: ProcessHandle | null = null;
  /** Its cgroups while it has them: made before its process, removed once its exit is durable. */
  private cgroup: AttemptCgroup | null = null;
  /** Ships its log from the files; the outcome is reported only once it has shipped all of it. */
  private tail: LogTail | null = null;
  private progress: ProgressFile | null = null;
  /** When its process was started (the agent's clock). */
  private spawnedAt: number | null = null;
  private exit: ExitRecord | null = null;
  private readonly delivery: DeliveryProgress = { logShipped: false, uploaded: new Map() };
  private delivering: Promise<void> | null = null;
  private finish!: (end: RunnerEnd) => void;
  private readonly watchers: ((to: AttemptPhase, from: AttemptPhase) => void)[] = [];
  /** Settles once the runner reaches a final phase: nothing more of it is listed, owed or run. */
  readonly done: Promise<RunnerEnd> = new Promise((resolve) => (this.finish = resolve));

  private constructor(
    readonly a: AssignmentWire,
    private readonly d: RunnerDeps,
  ) {}

  /** A new assignment: its directory, acknowledgement and inputs, its process, its outcome. */
  static accept(a: AssignmentWire, d: RunnerDeps): AttemptRunner {
    const r = new AttemptRunner(a, d);
    r.guard(r.execute());
    return r;
  }

  /**
   * Takes over an attempt the previous run of the agent started and that still runs: it is listed
   * in heartbeats again (renewing its lease, if the server has not given it up: then the answer
   * says kill), its log is followed from where the server's copy ends, and its outcome is read from
   * the shim's status file when it ends. Without a pid record (the previous agent died before
   * writing it) the timeout counts from now.
   */
  static reattach(a: AssignmentWire, d: RunnerDeps, pid: number, paths: AttemptPaths, spawnedAt?: number): AttemptRunner {
    const r = new AttemptRunner(a, d);
    r.paths = paths;
    r.move(AttemptPhase.running);
    const startedAt = spawnedAt ?? d.now();
    r.spawnedAt = startedAt;
    const timeout = a.timeoutSeconds ? { seconds: a.timeoutSeconds, remainingMs: a.timeoutSeconds * 1000 - (d.now() - startedAt) } : null;
    r.cgroup = d.openCgroup(a.attemptId);
    r.handle = d.attach(pid, paths, timeout, r.cgroup);
    r.tail = r.logTail(null);
    r.tail.follow();
    d.log(`attempt ${describe(a)} still runs (pid ${pid}, started by the previous agent); re-attached`);
    r.guard(
      r.handle.done.then((result) => {
        // Its shim was killed too: how it ended cannot be known, and a guess would charge the
        // user for it. Not reported: the server reaps it as lost (its infrastructure budget).
        if (result.kind === 'unknown') r.dropFor(dropReason('exit-unknown', EXIT_UNKNOWN));
        return r.conclude(result);
      }),
    );
    return r;
  }

  /** An attempt that ended before a restart, its exit recorded: its log (from where the server's copy ends) and outcome are owed. */
  static owed(a: AssignmentWire, d: RunnerDeps, paths: AttemptPaths, exit: ExitRecord): AttemptRunner {
    const r = new AttemptRunner(a, d);
    r.paths = paths;
    r.exit = exit;
    r.move(AttemptPhase.owed);
    r.tail = r.logTail(null);
    return r;
  }

  get phase(): AttemptPhase {
    return this.current;
  }

  /** Why the server no longer wants it, if it does not. */
  get dropped(): DropReason | null {
    return this.why;
  }

  /** Its process may still run and nobody has given it up yet. */
  get live(): boolean {
    return mayRun(this.current) && !this.why;
  }

  /**
   * Listed in heartbeats (the server keeps its lease and its resources): until it is final, and a
   * dropped one only until its process is gone, so that nothing new lands on its GPUs during the kill.
   */
  get listed(): boolean {
    if (isFinal(this.current)) return false;
    return !this.why || !(this.current === AttemptPhase.owed || isDelivering(this.current));
  }

  /**
   * Whether the reporter is about to be handed an item of it: the acknowledgement of one being
   * prepared, the outcome of one whose process ended, or perhaps that of one whose process started
   * after `youngSince` and may be about to end. A report waits a little for those (Reporter's
   * `coming`, at most its `gatherMs`), so that a group of them shares one request.
   */
  coming(youngSince: number): boolean {
    if (this.why) return false;
    switch (this.current) {
      case AttemptPhase.accepted:
        // Its acknowledgement, unless it was started at placement (it has none).
        return !this.a.started;
      case AttemptPhase.ended:
      case AttemptPhase.owed:
      case AttemptPhase.shippingLog:
        return true;
      case AttemptPhase.starting:
      case AttemptPhase.running:
        return (this.spawnedAt ?? -Infinity) > youngSince;
      default:
        return false;
    }
  }

  /** Its entry in the next heartbeat; progress rides along only when the stage wrote something new (stage-progress.ts). */
  async heartbeatItem(): Promise<HeartbeatRequest['running'][number]> {
    const progress = await (this.progress?.changed().catch(() => null) ?? null);
    return { attemptId: this.a.attemptId, token: this.a.token, ...(progress ? { progress } : {}) };
  }

  /**
   * The process is gone but its exit has not been processed yet (this agent was frozen, or busy).
   * Nothing is left to kill; its outcome goes to the server as it is, and the attempt's fencing
   * token decides there whether it still counts (a late report is refused, and logged as such).
   */
  endedOnItsOwn(): boolean {
    return this.current === AttemptPhase.running && !this.why && this.handle?.pid != null && !this.d.groupAlive(this.handle.pid);
  }

  /**
   * The server decided (a kill), or will (a lost lease, the agent stopping): killed, nothing
   * reported, unless its process already ended on its own. `graceMs`: how long between TERM and
   * KILL (a preempted attempt's time to checkpoint); else the cluster's kill grace.
   */
  kill(why: DropReason, graceMs?: number): void {
    if (!this.endedOnItsOwn()) this.dropFor(why, graceMs);
  }

  /** Every move from now on, as it happens (for a trace, or a test). */
  onMove(watcher: (to: AttemptPhase, from: AttemptPhase) => void): void {
    this.watchers.push(watcher);
  }

  /** Delivers its outcome if one is owed; one delivery under way is joined, not repeated. */
  deliver(): Promise<void> {
    if (this.delivering) return this.delivering;
    if (this.current !== AttemptPhase.owed || this.why || this.d.halt.aborted) return Promise.resolve();
    this.delivering = this.deliverOnce().finally(() => (this.delivering = null));
    return this.delivering;
  }

  /** The delivery under way, if any (the agent waits for it to wind down when it halts). */
  settling(): Promise<void> {
    return this.delivering ?? Promise.resolve();
  }

  /** The agent stops and leaves its process running, as after a crash: the next start re-attaches to it. */
  leave(): void {
    if (this.current !== AttemptPhase.starting && this.current !== AttemptPhase.running) return;
    this.tail?.stop();
    this.handle?.leave();
    this.move(AttemptPhase.left);
  }

  private async execute(): Promise<void> {
    const { a, d } = this;
    const paths = await d.state.createAttempt(a);
    if (!paths) {
      d.log(`attempt ${describe(a)} was assigned again; already handled, ignoring`);
      return this.move(AttemptPhase.forgotten);
    }
    this.paths = paths;
    const early = this.dropReasonNow();
    if (early) return this.settle(AttemptPhase.dropped, { result: 'dropped', note: early.detail });
    // Inputs are fetched while the attempt is acknowledged: both are on the way from ready to
    // running. Nothing runs before the acknowledgement, and a refused one discards the inputs. An
    // upstream without files costs only its directory (downloadInputs sends no request for it).
    const inputs =
      a.inputs.length === 0
        ? null
        : d.client.downloadInputs(a.inputs, paths.input).then(
            () => null,
            (err: unknown) => err,
          );
    // Started at placement (docs/agent.md, "Started at placement"): the server wrote it running in
    // the transaction whose answer carried it; there is nothing to acknowledge, and a cancel since
    // comes as a kill on the next heartbeat, which lists it from now on.
    if (!a.started) {
      const acked = await this.acknowledge(inputs);
      if (!acked) return;
    }
    const inputError = await inputs;
    if (!this.why && inputError) {
      if (inputError instanceof StaleAttempt) this.dropFor(dropReason('stale', 'stale: ' + inputError.message));
      // Cut short by stop(), not a fault of the inputs: the server reaps it as lost.
      else if (d.halt.aborted) this.dropFor(dropReason('agent-stopping', 'agent stopping'));
      else return this.conclude({ kind: 'inputs-failed', exitCode: null, signal: null, reason: `input download failed: ${errorText(inputError)}` });
    }
    const before = this.dropReasonNow();
    if (before) return this.conclude({ kind: 'killed', exitCode: null, signal: null, reason: `killed: ${before.detail}` });
    return this.run(paths);
  }

  /**
   * Asks the server whether it may run (the acknowledgement: scheduled → running), the inputs
   * coming meanwhile. False: it may not, and the runner has settled.
   */
  private async acknowledge(inputs: Promise<unknown> | null): Promise<boolean> {
    const { a, d } = this;
    this.move(AttemptPhase.acknowledging);
    let ack: ReportItemResult;
    try {
      // Dropped before it was asked: the reporter refuses a withdrawn item at once.
      ack = await d.reporter.acknowledge(a.attemptId, a.token, this.withdraw.signal);
    } catch (err) {
      await inputs;
      // Nothing ran, so nothing is owed: forget it entirely, so that the server's resend of an
      // unacknowledged assignment is taken as new rather than ignored as a duplicate. The
      // directory goes first: a resend taken while it still existed would be refused as a
      // duplicate; while the runner is still known, a resend is ignored and comes again next poll.
      d.log(`attempt ${describe(a)} could not be acknowledged (${this.why?.detail ?? errorText(err)}); not running it`);
      await d.state.removeAttempt(a.attemptId).catch((e) => d.log(`cannot remove ${a.attemptId}: ${errorText(e)}`));
      this.move(AttemptPhase.forgotten);
      return false;
    }
    // `duplicate`: an earlier copy of this acknowledgement was recorded (a resend after its answer was lost).
    if (ack.result === 'stale' || ack.result === 'refused') {
      await inputs;
      d.log(`attempt ${describe(a)} is no longer current (${ack.result}${ack.message ? `: ${ack.message}` : ''}); not running it`);
      const note = `${ack.result}: ${ack.message ?? 'not current'}`;
      this.dropFor(dropReason(ack.result === 'stale' ? 'stale' : 'refused', note));
      await this.settle(AttemptPhase.dropped, { result: 'dropped', note });
      return false;
    }
    return true;
  }

  /** Spawns the process, records its pid (on disk, then to the server) and waits for its end. */
  private async run(paths: AttemptPaths): Promise<void> {
    const { a, d } = this;
    this.move(AttemptPhase.starting);
    this.spawnedAt = d.now();
    const { handle, progress, cgroup } = await d.launch(a, paths);
    this.handle = handle;
    // Left while it was being started (the launch waits for a contained command's pid, to start it
    // again should its cgroup go: launch-attempt.ts): left now, as leave() would have.
    if (this.current === AttemptPhase.left) handle.leave();
    this.cgroup = cgroup;
    this.progress = progress;
    // A new attempt: the server has none of its log yet.
    this.tail = this.logTail({ stdout: 0, stderr: 0 });
    const pid = await handle.started;
    if (pid !== null) {
      this.tail.follow();
      const recorded = await d.state.writePid(a.attemptId, pid).then(
        () => true,
        (err) => (d.log(`cannot record pid of ${a.attemptId}: ${errorText(err)}`), false),
      );
      d.debug(`attempt ${describe(a)} started pid ${pid}`);
      if (this.current === AttemptPhase.starting) this.move(AttemptPhase.running);
      // Untracked, it could outlive a crash of this agent unseen: better not to run it at all.
      if (!recorded) this.dropFor(dropReason('pid-unrecorded', 'its pid could not be recorded'));
      const why = this.dropReasonNow();
      // A kill that arrived while the process was being spawned.
      if (why) void handle.kill(why.detail, this.dropGraceMs);
      // Only records the pid; the attempt was acknowledged before the spawn, or started at placement.
      else
        void d.reporter.recordPid(a.attemptId, a.token, pid, this.withdraw.signal).then(
          (r) => {
            if (r?.result === 'stale') this.dropFor(dropReason('stale', `stale: ${r.message ?? 'not current'}`));
            else if (r?.result === 'refused') d.log(`pid of ${a.attemptId} refused: ${r.message ?? 'no reason given'}`);
          },
          (err: unknown) => {
            if (!this.why && !d.halt.aborted) d.log(`cannot report pid of ${a.attemptId}: ${errorText(err)}`);
          },
        );
    }
    return this.conclude(await handle.done);
  }

  /**
   * The process is over (and its cgroups empty: its handle settles only then): its exit is recorded
   * (durably), with what its cgroups measured, then they are removed, then its log and outcome
   * delivered.
   */
  private async conclude(result: ProcessEnd): Promise<void> {
    const { a, d } = this;
    const left = this.current === AttemptPhase.left;
    if (!left) this.move(AttemptPhase.ended);
    const why = this.why;
    const measured = left ? null : this.measure(result);
    const exit: ExitRecord = {
      ...(measured?.end ?? result),
      finishedAt: new Date(d.now()).toISOString(),
      attempt: attemptIdentity(a),
      // Recorded, so that a restart after a crash does not report it either.
      ...(why ? { dropped: why.detail } : {}),
      // Recorded, so that a restart reports it: the cgroups it was read from are removed next.
      ...(measured ? { usage: measured.usage } : {}),
    };
    await d.state.writeExit(a.attemptId, exit);
    this.exit = exit;
    // Left by an agent that stopped: the outcome stays on disk for the next start (whose sweep removes its cgroups).
    if (left) return;
    await this.removeCgroup();
    if (why) {
      d.log(`attempt ${describe(a)} ${describeExit(exit)}`);
      // Its log up to the kill is still worth having (a canceled stage's last lines): one try,
      // which the server refuses if the attempt is no longer this agent's (so a stale one's is not
      // tried). Still listed while it goes: a heartbeat without it tells the server its process is
      // gone, and a follower of its log stops there (contract/log-follow.ts), so the last lines
      // must be in before that.
      if (why.kind !== 'stale') await this.tail?.drain().catch(() => {});
      return this.settle(AttemptPhase.dropped, { result: 'dropped', note: why.detail });
    }
    // One line per attempt by default, when its outcome is reported: under load an agent runs
    // hundreds a second, and three lines each cost 7 % of its time (measured).
    d.debug(`attempt ${describe(a)} ${describeExit(exit)}`);
    if (await crashBeforeReport(d.state.dataDir)) return this.move(AttemptPhase.left);
    this.move(AttemptPhase.owed);
    await this.deliver();
  }

  private async deliverOnce(): Promise<void> {
    const { a, d } = this;
    const exit = this.exit!;
    const paths = this.paths!;
    this.move(this.delivery.logShipped || !this.tail ? AttemptPhase.reporting : AttemptPhase.shippingLog);
    const out = await deliverOutcome(
      {
        client: d.client,
        reporter: d.reporter,
        now: d.now,
        log: d.log,
        typedEnds: () => (d.settings().protocol ?? 1) >= 2,
        sendsUsage: () => (d.settings().protocol ?? 1) >= 3,
        giveUpMs: d.giveUpMs,
      },
      { a, exit, outputDir: paths.output, dir: paths.dir, tail: this.tail, progress: this.delivery, signal: this.withdraw.signal },
      () => {
        if (this.current === AttemptPhase.shippingLog) this.move(AttemptPhase.reporting);
      },
    );
    if (out.kind === 'stale') this.dropFor(dropReason('stale', out.detail));
    // A kill that came while it was under way wins over a retry, and over a refusal.
    const why = this.dropReasonNow();
    if (why && out.kind !== 'delivered') return this.settle(AttemptPhase.dropped, { result: 'dropped', note: why.detail });
    if (out.kind === 'stale') return;
    if (out.kind === 'later') {
      // A stop that came while it was under way: the outcome stays owed, on disk.
      if (!d.halt.aborted) d.log(out.step === 'log' ? `attempt ${describe(a)}: ${out.line}` : `attempt ${describe(a)} ${describeExit(exit)}; ${out.line}`);
      return this.move(AttemptPhase.owed);
    }
    d.log(`attempt ${describe(a)} ${describeExit(exit)}; ${out.line}`);
    return this.settle(out.kind === 'given-up' ? AttemptPhase.abandoned : out.kind === 'refused' ? AttemptPhase.dropped : AttemptPhase.delivered, out.record);
  }

  /** What its cgroups say of its end (cgroup-end.ts); null without cgroups, or when they cannot be read. */
  private measure(result: ProcessEnd): CgroupEnd<ProcessEnd> | null {
    if (!this.cgroup) return null;
    try {
      return cgroupEnd(this.cgroup, result, this.a.limits ?? null);
    } catch (err) {
      this.d.log(`attempt ${describe(this.a)}: cannot read what it used from its cgroups: ${errorText(err)}`);
      return null;
    }
  }

  /** Its cgroups, once its exit is durable (recycled or removed); one that cannot be removed is left to the next start's sweep. */
  private async removeCgroup(): Promise<void> {
    const cg = this.cgroup;
    if (!cg) return;
    this.cgroup = null;
    await this.d
      .releaseCgroup(cg)
      .catch((err: unknown) => this.d.log(`attempt ${describe(this.a)}: cannot remove its cgroups (${errorText(err)}); the next start sweeps them`));
  }

  /** The server no longer wants it: killed if it runs; settled at once if only its outcome was owed. */
  private dropFor(why: DropReason, graceMs?: number): void {
    if (this.why || isFinal(this.current)) return;
    this.why = why;
    // What still waits in the reporter is not sent: an acknowledgement (nothing runs), a pid, an outcome.
    this.withdraw.abort();
    // Finished but not yet reported: the report would be refused. A delivery under way may still land, and settles it.
    if (this.current === AttemptPhase.owed) return void this.guard(this.settle(AttemptPhase.dropped, { result: 'dropped', note: why.detail }));
    // Nothing to kill yet (the flow sees the reason after its next step), or any more.
    if (isBeforeProcess(this.current) || !mayRun(this.current)) return;
    this.dropGraceMs = graceMs;
    this.d.log(`killing attempt ${describe(this.a)}: ${why.detail}${graceMs !== undefined ? ` (TERM, then KILL after ${graceMs} ms)` : ''}`);
    const starting = this.current === AttemptPhase.starting;
    this.move(AttemptPhase.killing);
    // While starting, the spawn's answer is awaited first: run() kills once the pid is known.
    if (!starting) void this.handle?.kill(why.detail, graceMs);
  }

  /** Read through a call: a reason set during an await is not seen by a check made before it. */
  private dropReasonNow(): DropReason | null {
    return this.why;
  }

  /** Nothing more is owed to the server: recorded, so that a restart does not report it again. */
  private async settle(to: AttemptPhase, rec: Omit<ReportedRecord, 'at'>): Promise<void> {
    const { d } = this;
    // Final at once (no longer listed, nothing more tried); `done` once the record is on disk.
    this.move(to, false);
    this.tail?.stop();
    const id = this.a.attemptId;
    await d.state
      .markReported(id, { ...rec, at: new Date(d.now()).toISOString() })
      .catch((err) => d.log(`cannot record that ${id} is settled: ${errorText(err)}`));
    // Its log is the server's now, whole: the files go (a secret it printed is not kept on this
    // machine too). Kept when the server lacks part of it (refused, stale, unreachable, or written
    // after the last shipment): the directory keeps the only copy until it is pruned.
    if (this.tail?.shippedAll()) {
      try {
        d.state.removeLogs(id);
      } catch (err) {
        d.log(`cannot remove the log files of ${id}: ${errorText(err)}`);
      }
    }
    // Nothing of it runs any more and its directory is closed (markReported): its uid may go to another.
    d.users.release(id);
    await d.state.prune().catch((err) => d.log(`cannot prune old attempts: ${errorText(err)}`));
    this.finish({ phase: to });
  }

  /** `announce`: a final phase settles `done` now (settle() does it once its record is written). */
  private move(to: AttemptPhase, announce = true): void {
    if (this.current === to) return;
    const from = this.current;
    this.current = nextPhase(this.a.attemptId, from, to);
    for (const w of this.watchers) w(to, from);
    if (announce && isFinal(to)) this.finish({ phase: to });
  }

  /** A step that threw is a bug or a broken disk: logged, and the runner ends where it stood. */
  private guard(p: Promise<void>): void {
    p.catch((err: unknown) => {
      this.d.log(`attempt ${describe(this.a)}: ${errorText(err)}`);
      this.tail?.stop();
      this.finish({ phase: this.current, error: err });
    });
  }

  /** The shipper of its log; a 409 from the server drops the attempt (it is no longer current). */
  private logTail(known: { stdout: number; stderr: number } | null): LogTail {
    const { a, d } = this;
    const paths = this.paths!;
    const tail: LogTail = new LogTail({
      files: { stdout: paths.stdout, stderr: paths.stderr },
      // Not withdrawn with the attempt: a canceled or preempted attempt's last lines (written in its
      // kill grace: a cleanup, a checkpoint) still ship, since the server takes logs of an ended
      // attempt from its token's holder; a stale one's are refused there, and the tail stops.
      send: (pieces) => d.client.logs(a.attemptId, a.token, pieces),
      known,
      onError: (err) => {
        if (err instanceof StaleAttempt) {
          tail.stop();
          this.dropFor(dropReason('stale', 'stale: ' + err.message));
        }
      },
    });
    return tail;
  }
}

/** What an exit record keeps of its assignment, to report it should the assignment record be lost. */
export function attemptIdentity(a: AssignmentWire): ExitRecord['attempt'] {
  return { attemptId: a.attemptId, token: a.token, jobId: a.jobId, stageName: a.stageName, attemptNumber: a.attemptNumber };
}

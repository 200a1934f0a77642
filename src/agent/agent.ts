/**
 * The worker agent, composed: it registers this machine (link/), heartbeats (a long poll that
 * also brings assignments and kills), hands each assignment to its own attempt runner
 * (attempt/attempt-runner.ts: the attempt's process, kill, log, outcome) and each kill to the
 * runner it names, takes over what a previous run left on disk (disk/, attempt/recover-attempts.ts),
 * and stops. Acknowledgements, pids and outcomes of all attempts share one stream of batched
 * reports (link/reporter.ts). docs/agent.md has the timeline and what happens after a crash.
 */
import { rmSync } from 'node:fs';
import { setMaxListeners } from 'node:events';
import { join, resolve } from 'node:path';
import type { AgentSettings, AssignmentWire, ReportRequest } from '../api/contract/agent-protocol.js';
import { silenceGrowthMs } from '../domain/heartbeat-period.js';
import { AgentClient, AgentHttpError, DEFAULT_RETRY, isRetryable, UnknownMachine, type RetryPolicy } from './link/agent-client.js';
import { AgentState } from './disk/agent-state.js';
import { makeAgentFilesPrivate } from './disk/agent-private-files.js';
import { makeDirectories } from './disk/mode-tightener.js';
import { registerRequest, registerWithToken, type Rendezvous } from './link/register-machine.js';
import type { DetectedMachine } from './machine/machine-detect.js';
import { processGroupAlive } from './attempt/process-group.js';
import { attachProcess } from './attempt/process-runner.js';
import { dropReason } from './attempt/drop-reason.js';
import { AttemptRunner, type RunnerDeps } from './attempt/attempt-runner.js';
import { startedAnswerFault } from './fault-hooks.js';
import { recoverAttempts } from './attempt/recover-attempts.js';
import { launchAttempt } from './attempt/launch-attempt.js';
import { inheritedEnv } from './attempt/attempt-env.js';
import { LauncherPool, launcherCount } from './attempt/launcher-pool.js';
import { DEFAULT_CONTAINMENT, type ContainmentOptions } from './contain/containment-options.js';
import { AttemptUsers, attemptUserPolicy, reachablePolicy, userProblem, userReport, type AttemptUserPolicy } from './contain/attempt-users.js';
import { closedAncestor, makePassableDir } from './disk/attempt-owner.js';
import { describeCgroups, setUpCgroups } from './contain/agent-cgroups.js';
import { buildContainmentReport, migIsolationReport } from './contain/build-containment-report.js';
import { cgroupJoinWaitHint } from './contain/cgroup-join-wait.js';
import { migIsolation } from './machine/mig-capabilities.js';
import { chooseSandbox } from './contain/choose-sandbox.js';
import { findSandbox } from './contain/find-sandbox.js';
import type { SandboxTool } from './contain/sandbox-argv.js';
import type { CgroupTree } from './contain/cgroup-tree.js';
import type { ContainmentReport, GpuSharingMode } from '../api/contract/containment.js';
import { LAUNCHER_C, launcherPrograms } from './attempt/launcher-programs.js';
import { hostLauncher } from './attempt/host-launcher.js';
import { Reporter } from './link/reporter.js';
import { AnswersKnown } from './link/answers-known.js';
import { errorText } from '../lib/error-text.js';
import { privateMode } from '../lib/private-mode.js';
import { backoffDelay } from '../lib/backoff-delay.js';
import { retryAfterWaitMs } from '../lib/retry-after.js';
import { sleep } from '../lib/sleep.js';

export interface AgentClock {
  now(): number;
}

export interface AgentOptions {
  serverUrl: string;
  dataDir: string;
  machine: DetectedMachine;
  log?: (line: string) => void;
  clock?: AgentClock;
  requestTimeoutMs?: number;
  retry?: Partial<RetryPolicy>;
  /** How long stop() keeps trying to deliver finished outcomes before leaving them on disk. */
  stopDeliverMs?: number;
  /** Print a line for every step of every attempt (started, exited), not only one when its outcome is reported. */
  verbose?: boolean;
  /** How long a pid record may wait for a report that goes anyway (Reporter.recordPid). */
  pidDelayMs?: number;
  /** Reports in flight at once (Reporter's maxInFlight; `--reports-in-flight`); absent: DEFAULT_REPORTS_IN_FLIGHT. */
  reportsInFlight?: number;
  /** Run assignments the server started at placement without acknowledging them (docs/agent.md,
   *  "Started at placement"), where its settings offer that. Default yes; false: acknowledge every
   *  assignment before its spawn, as agents before it did. */
  startedAssignments?: boolean;
  /** Start commands through a launcher (launcher.ts: the C one, else Python's, else a bash) rather than by spawning from the agent. Default: yes, as GANTRY_AGENT_LAUNCHER says (launcher-programs.ts); false: never. */
  /**
   * A join token (docs/security.md): the first registration gets the machine its own credential,
   * kept in the data directory and used from then on; the join token again only when that
   * credential is refused (revoked, or from another server). Null: the credential must be there.
   */
  joinToken?: string | null;
  /** PEM of the CA that signed the server's certificate, for a private one. */
  ca?: string;
  launcher?: boolean;
  /** Where preemptible stages keep GANTRY_CHECKPOINT_DIR (one directory per job and stage, kept
   *  across attempts); default `checkpoints/` in the data directory. Agents that share one (a
   *  network file system) let a stage resume on another machine. */
  checkpointRoot?: string;
  /** Cgroups, users, sandbox (docs/containment.md); default DEFAULT_CONTAINMENT: what the host offers. */
  containment?: Partial<ContainmentOptions>;
  /** How a share of a GPU is bounded (`--gpu-sharing`, docs/machines.md): `mps` sets the variables MPS reads; default `time-slicing`, nothing. */
  gpuSharing?: GpuSharingMode;
  /** Where gangs whose rank 0 runs here meet (`--advertise-addr`, `--gang-ports`; docs/gangs.md, "Rendezvous"); each absent: the host's name, 29500-29599. */
  rendezvous?: Rendezvous;
}

const MAX_WAIT_MS = 30_000;
/** How long an outcome is retried before the agent gives it up (see deliverOnce and Reporter). */
const GIVE_UP_DELIVERY_MS = 5 * 60_000;
/**
 * The longest a report waits for items about to join it (Reporter's `gatherMs`), and how young a
 * process must be for its outcome to count as about to come: a process that ends within its first
 * few milliseconds most likely belongs to a group of short ones started together, whose outcomes
 * then share a report. Measured on the throughput bench (3,000 stages of `true`): 800 reports
 * without waiting, 605 waiting only for acknowledgements and exits already seen, 548 with young
 * processes counted too; the wait never adds more than this to a report.
 */
const REPORT_GATHER_MS = 10;

/**
 * Reports in flight at once by default (docs/agent.md, "Reports are batched"). One: a second was
 * meant to hide a report's round trips to PostgreSQL, and measured slower there (the throughput
 * bench, 1,000 chains, same hour: 21.0 chains/s with two against 32.0 with one; the server's CPU a
 * stage 5.8 against 3.9 ms: two reports of one machine conflict and rerun). Kept as an option.
 */
export const DEFAULT_REPORTS_IN_FLIGHT = 1;

export class Agent {
  private readonly checkpointRoot: string;
  private readonly containment: ContainmentOptions;
  /** Who attempts run as, from the options (attempt-users.ts); `users` once start() checked the directories. */
  private readonly userPolicy: AttemptUserPolicy;
  private users: AttemptUsers | null = null;
  private readonly state: AgentState;
  private readonly client: AgentClient;
  private readonly reporter: Reporter;
  private readonly machine: DetectedMachine;
  private readonly gpuSharing: GpuSharingMode;
  private readonly rendezvous: Rendezvous;
  private readonly logLine: (line: string) => void;
  private readonly clock: AgentClock;
  private readonly stopDeliverMs: number;
  /** What attempts inherit of the agent's environment, read and filtered once: process.env is slow to walk, and attempts are many. */
  private readonly inheritedEnv: Readonly<Record<string, string>> = inheritedEnv(process.env);
  private readonly launcher: LauncherPool | null;
  /** The private directory the C launcher was built into for this start, where the data directory could not keep it (host-launcher.ts): removed at stop. */
  private launcherBuildDir: string | null = null;
  private readonly verbose: boolean;
  /** Never ask for assignments started at placement (AgentOptions.startedAssignments false). */
  private readonly acknowledgeAll: boolean;
  /** Ends every call: the last step of stop(). */
  private readonly halt = new AbortController();
  /** Ends the loop's long poll and waits, without cutting deliveries still owed. */
  private readonly loopAbort = new AbortController();
  private id: string | null = null;
  private settings: AgentSettings | null = null;
  private readonly runners = new Map<string, AttemptRunner>();
  /** What a heartbeat's list knows of (answers-known.ts). */
  private readonly known = new AnswersKnown();
  /** What every attempt runner is given (attempt-runner.ts). */
  private readonly runnerDeps: RunnerDeps;
  private readonly joinToken: string | null;
  /** Where attempts' cgroups are made (set at start; null: none). */
  private cgroups: CgroupTree | null = null;
  /** What it enforces, as it registers it (set at start). */
  private containmentReport: ContainmentReport | null = null;
  /** What every command is wrapped in (--sandbox; set at start; null: none). */
  private sandbox: SandboxTool | null = null;
  private lastHeartbeatSentOk = 0;
  /** The period the server gave last (it grows with the fleet: docs/failure-detection.md), with the settings it came under. */
  private given: { settings: AgentSettings; periodMs: number } | null = null;
  private loop: Promise<void> | null = null;
  private watchdog: NodeJS.Timeout | null = null;
  private registering: Promise<boolean> | null = null;
  private stopping = false;

  constructor(opts: AgentOptions) {
    // Every call in flight listens on these (agent-client.ts, removed when it ends): a busy machine
    // has more than Node's 10 at once (each running stage's log and output uploads, the reports,
    // the heartbeat), which is no leak, and Node's warning would say it is.
    setMaxListeners(0, this.halt.signal, this.loopAbort.signal);
    this.machine = opts.machine;
    this.gpuSharing = opts.gpuSharing ?? 'time-slicing';
    this.rendezvous = opts.rendezvous ?? {};
    // Called later, once this.log is set: a failed compaction loses nothing, but a person should know.
    this.state = new AgentState(opts.dataDir, {
      onJournalError: (err) => this.log(`the journal's compaction failed, the journal kept as it was: ${errorText(err)}`),
    });
    this.client = new AgentClient({
      serverUrl: opts.serverUrl,
      ...(opts.ca ? { ca: opts.ca } : {}),
      signal: this.halt.signal,
      ...(opts.requestTimeoutMs !== undefined ? { requestTimeoutMs: opts.requestTimeoutMs } : {}),
      ...(opts.retry ? { retry: opts.retry } : {}),
    });
    const sink = opts.log ?? ((line: string) => void process.stderr.write(line + '\n'));
    this.logLine = (line) => sink(`agent ${this.machine.name}: ${line}`);
    this.clock = opts.clock ?? { now: () => Date.now() };
    this.stopDeliverMs = opts.stopDeliverMs ?? 5000;
    this.verbose = opts.verbose ?? false;
    this.acknowledgeAll = opts.startedAssignments === false;
    this.joinToken = opts.joinToken ?? null;
    this.containment = { ...DEFAULT_CONTAINMENT, ...opts.containment };
    this.checkpointRoot = resolve(opts.checkpointRoot ?? join(opts.dataDir, 'checkpoints'));
    // An unknown --run-as user is an error now, before anything registers.
    this.userPolicy = attemptUserPolicy(this.containment);
    // The C launcher's binary is checked, and built where none runs here, only when C is wanted (host-launcher.ts).
    const programs =
      opts.launcher === false
        ? []
        : launcherPrograms(process.env, () =>
            hostLauncher({
              prebuilt: LAUNCHER_C,
              cacheDir: join(opts.dataDir, 'launcher'),
              log: (line) => this.log(line),
              madeTemporary: (dir) => (this.launcherBuildDir = dir),
            }),
          );
    this.launcher = programs.length ? new LauncherPool(this.inheritedEnv, (line) => this.log(line), programs, launcherCount(process.env)) : null;
    const retry = { ...DEFAULT_RETRY, ...opts.retry };
    this.reporter = new Reporter({
      // Outcomes ask for the assignments they make room for, where the server offers that: a
      // busy machine's next stages come with the answer, not on a heartbeat of their own, and
      // started at placement where the server can (no acknowledgement: docs/agent.md).
      send: async (req, signal) => {
        const sent = this.known.sent();
        let asOf: number | undefined;
        try {
          const res = await startedAnswerFault(this.state.dataDir, await this.client.report(this.id!, this.asking(req), signal));
          asOf = res.asOf;
          return res;
        } finally {
          // Settled once the Reporter has handed the answer's assignments to their runners, which
          // it does as soon as this returns, before the event loop turns (answers-known.ts).
          setImmediate(() => this.known.settled(sent, asOf));
        }
      },
      // A report waits a little for what is about to join it (AttemptRunner.coming).
      coming: () => {
        let n = 0;
        const youngSince = this.clock.now() - REPORT_GATHER_MS;
        for (const r of this.runners.values()) if (r.coming(youngSince)) n++;
        return n;
      },
      gatherMs: REPORT_GATHER_MS,
      onAssignments: (assignments) => {
        for (const a of assignments) this.accept(a);
      },
      onUnknownMachine: () => {
        this.log(`server does not know machine ${this.id} (report); registering again`);
        return this.reregister();
      },
      signal: this.halt.signal,
      now: () => this.clock.now(),
      retry,
      giveUpMs: GIVE_UP_DELIVERY_MS,
      ...(opts.pidDelayMs !== undefined ? { pidDelayMs: opts.pidDelayMs } : {}),
      maxInFlight: opts.reportsInFlight ?? DEFAULT_REPORTS_IN_FLIGHT,
      onRetry: (err, failures) => {
        if (failures === 1 || failures % 10 === 0) this.log(`report failed (${failures} in a row): ${errorText(err)}; retrying`);
      },
    });
    const launch = { machineName: this.machine.name, inheritedEnv: this.inheritedEnv, checkpointRoot: this.checkpointRoot, launcher: this.launcher };
    this.runnerDeps = {
      client: this.client,
      reporter: this.reporter,
      state: this.state,
      launch: (a, paths) =>
        launchAttempt(
          {
            ...launch,
            killGraceMs: this.settings!.killGraceMs,
            users: this.users!,
            cgroups: this.cgroups,
            recordCgroup: (attemptId, ref) => this.state.recordCgroup(attemptId, ref),
            pidsMax: this.containment.pidsMax,
            sandbox: this.sandbox,
            log: (line) => this.log(line),
            gpus: this.machine.gpus,
            gpuSharing: this.gpuSharing,
          },
          a,
          paths,
        ),
      attach: (pid, paths, timeout, cgroup) => attachProcess({ pid, statusFile: paths.status, killGraceMs: this.settings!.killGraceMs, timeout, cgroup }),
      openCgroup: (attemptId) => this.cgroups?.open(attemptId, this.state.cgroupOf(attemptId)) ?? null,
      releaseCgroup: (cg) => (this.cgroups ? this.cgroups.release(cg) : cg.remove()),
      groupAlive: processGroupAlive,
      now: () => this.clock.now(),
      settings: () => this.settings!,
      halt: this.halt.signal,
      log: (line) => this.log(line),
      debug: (line) => this.debug(line),
      giveUpMs: GIVE_UP_DELIVERY_MS,
      users: {
        adopt: (attemptId, owner) => this.users!.adopt(attemptId, owner),
        release: (attemptId) => this.users!.release(attemptId),
      },
    };
  }

  get machineId(): string | null {
    return this.id;
  }

  get dataDir(): string {
    return this.state.dataDir;
  }

  /**
   * Finds what it can enforce (refusing to start where containment is required and missing),
   * registers, settles what a previous run of the agent left behind, then heartbeats in the background.
   */
  async start(): Promise<void> {
    // Each directory it makes on the way is passable: stages running as users of their own go through it to theirs.
    makeDirectories(this.state.dataDir, privateMode('agent-data-dir'));
    await this.openToUsers();
    await this.state.init();
    // What an earlier version left open (umask 022) is closed; what is made from now on is by the umask (run-agent-cli.ts).
    const modes = makeAgentFilesPrivate(this.state.dataDir, this.checkpointRoot);
    if (modes.changed.length > 0)
      this.log(`made ${modes.changed.length} file(s) of ${this.state.dataDir} private (owner-only) that an earlier version left open`);
    for (const problem of modes.problems) this.log(`cannot make a file private: ${problem}`);
    this.startContainment();
    if (!(await this.register())) return;
    // stop() may have come while registering: then nothing may start (a watchdog timer started
    // now would keep the process alive after it stopped).
    if (this.stopping) return;
    await this.recover();
    if (this.stopping) return;
    this.lastHeartbeatSentOk = this.clock.now();
    const s = this.settings!;
    this.watchdog = setInterval(() => this.checkLease(), Math.max(50, Math.min(1000, Math.floor(s.leaseMs / 5))));
    this.loop = this.heartbeatLoop();
  }

  /**
   * Decides who attempts run as (attempt-users.ts). For users of their own, the directories on the
   * way to their work/ and checkpoint directories are made passable (0711, attempt-owner.ts); one
   * above them that is not (a data directory in /root) leaves stages as the agent's user, saying
   * why, or stops an explicit --run-as.
   */
  private async openToUsers(): Promise<void> {
    let policy = this.userPolicy;
    if (policy.kind !== 'agent') {
      const attempts = join(this.state.dataDir, 'attempts');
      for (const d of [this.state.dataDir, attempts]) await makePassableDir(d);
      // A shared checkpoint root (a network file system) may refuse root: only checkpointing stages need it.
      await makePassableDir(this.checkpointRoot).catch((err) =>
        this.log(`cannot let attempts' users pass through ${this.checkpointRoot} (${errorText(err)}): stages that checkpoint may not reach it`),
      );
      const closed = (await closedAncestor(this.state.dataDir)) ?? (await closedAncestor(this.checkpointRoot));
      policy = reachablePolicy(policy, closed && { dir: closed.dir, mode: closed.st.mode });
    }
    this.users = new AttemptUsers(policy, this.state.dataDir, this.containment.uidLockDir);
    this.state.closeSettled = this.users.switching;
    const problem = userProblem(policy);
    if (problem) this.log(problem);
  }

  /**
   * Stops the loop. With `killRunning` (the default) running attempts are killed (TERM, grace,
   * KILL) and, like any attempt the agent gives up, not reported: the server reaps them as lost.
   * Without it they are left running, as after a crash; the next start re-attaches to them.
   * Either way finished outcomes get `stopDeliverMs` to be delivered, then stay on disk.
   */
  async stop(opts: { killRunning?: boolean } = {}): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    if (this.watchdog) clearInterval(this.watchdog);
    this.loopAbort.abort();
    await this.loop;
    const live = [...this.runners.values()].filter((r) => r.live && !r.endedOnItsOwn());
    if (opts.killRunning ?? true) {
      for (const r of live) r.kill(dropReason('agent-stopping', 'agent stopping'));
      await Promise.all(live.map((r) => r.done));
    } else {
      for (const r of live) r.leave();
    }
    const deadline = new Promise<void>((resolve) => setTimeout(resolve, this.stopDeliverMs).unref());
    await Promise.race([this.deliverPending(), deadline]);
    this.halt.abort();
    // Deliveries cut short by the halt wind down (their outcomes stay on disk).
    await Promise.allSettled([...this.runners.values()].map((r) => r.settling()));
    this.launcher?.close();
    // The launchers' binary, where it was built for this start only: a running process keeps its unlinked file.
    if (this.launcherBuildDir) {
      try {
        rmSync(this.launcherBuildDir, { recursive: true, force: true });
      } catch (err) {
        this.log(`the C launcher's build for this start was not removed (${errorText(err)}): ${this.launcherBuildDir}`);
      }
    }
    // The children waiting in spares read EOF once their launcher's stdin closes, and are killed
    // with their spares here all the same: removeEmpty() below then finds them gone.
    await this.cgroups?.dropPrepared();
    // Its idle uids (held between attempts: attempt-users.ts); those of attempts left running stay held.
    this.users?.close();
    // Its spare cgroups, then its subtree where nothing is left in it (attempts left running keep theirs for the next start).
    this.cgroups?.removeEmpty();
    this.log('stopped');
  }

  /**
   * Stops for good without throwing work away: the machine is drained (nothing new is placed
   * there), the agent waits for its attempts to end and their outcomes to be delivered, then
   * stops. With `now`, the server stops them at once (requeued elsewhere, charged to no budget)
   * and this agent kills them on its next heartbeat. A second call with `now` escalates the first.
   */
  async drainAndStop(now: boolean): Promise<void> {
    if (this.stopping) return;
    if (!this.id) return this.stop();
    const r = await this.client.drainSelf(this.id, now, this.halt.signal);
    const running = [...this.runners.values()].filter((r) => r.live).length;
    this.log(now ? `drained at once: ${r.stopped} attempt(s) stopped, requeued elsewhere` : `draining: no new work; waiting for ${running} running attempt(s)`);
    this.draining ??= (async () => {
      while (!this.stopping && this.runners.size > 0) await this.pause(200);
      await this.stop();
    })();
    return this.draining;
  }

  private draining: Promise<void> | null = null;

  private debug(line: string): void {
    if (this.verbose) this.log(line);
  }

  private log(line: string): void {
    try {
      this.logLine(line);
    } catch {
      // A broken log sink must not break the agent.
    }
  }

  /**
   * The cgroups attempts run in (agent-cgroups.ts), and the report of what is enforced. Throws
   * (ContainmentRequired) where containment is required and the host does not offer it.
   */
  private startContainment(): void {
    const { tree, enforcement, joinWait } = setUpCgroups(this.containment, this.machine.name, this.state.dataDir);
    this.cgroups = tree;
    // A recycled spare gets a C launcher's child joined to it at its release, so that the next
    // attempt's start skips the joins and their wait (docs/containment.md, "A child waiting in a spare").
    if (tree) tree.preparer = this.launcher;
    // Who attempts run as, as decided at start (openToUsers).
    const policy = this.users!.policy;
    // The sandbox is probed as the attempts' user (the first of the range), as the launcher will run it.
    const probeUser = policy.kind === 'dynamic' ? { uid: policy.first, gid: policy.first } : policy.kind === 'run-as' ? policy.user : null;
    const sandbox = chooseSandbox(this.containment, () => findSandbox({ user: probeUser }));
    this.sandbox = sandbox.tool;
    const userProblems = [userProblem(policy)].filter((p): p is string => p !== null);
    const mig = migIsolationReport(migIsolation(this.machine.gpus), enforcement.devices, sandbox.tool !== null);
    this.containmentReport = buildContainmentReport(enforcement, {
      user: userReport(policy),
      sandbox: sandbox.report,
      problems: [...userProblems, ...sandbox.problems],
      gpuSharing: this.gpuSharing,
      mig,
      joinWait,
    });
    this.log(describeCgroups(enforcement));
    const joinHint = joinWait && cgroupJoinWaitHint(joinWait);
    if (joinHint) this.log(joinHint);
    if (mig.problem) this.log(mig.problem);
    else if (mig.isolated) this.log("MIG devices isolated: each attempt may open only its own MIG devices' capability files");
    for (const p of sandbox.problems) this.log(p);
    if (sandbox.tool) this.log(`commands run in a sandbox (${sandbox.tool.bwrap})`);
  }

  /** Until registered or stopped; false when stopped first. A 4xx (bad name, bad labels) throws. */
  private async register(): Promise<boolean> {
    const m = this.machine;
    const req = registerRequest(m, this.containmentReport ?? undefined, this.rendezvous);
    for (let failures = 0; !this.stopping; failures++) {
      try {
        const res = await registerWithToken(
          { client: this.client, state: this.state, joinToken: this.joinToken, log: (line) => this.log(line), signal: this.loopAbort.signal },
          req,
        );
        this.id = res.machineId;
        this.settings = res.settings;
        await this.state.writeIdentity({ name: m.name, machineId: res.machineId });
        // A stop that came during the write: the registration stands, but nothing more starts.
        if (this.stopping) return false;
        const s = res.settings;
        const starter = this.launcher?.program ? `the ${this.launcher.program} launcher` : 'the agent itself';
        this.log(
          `registered as ${res.machineId} (heartbeat ${s.heartbeatMs} ms, lease ${s.leaseMs} ms, kill grace ${s.killGraceMs} ms); commands started by ${starter}, as ${this.users?.report ?? 'the agent'}`,
        );
        return true;
      } catch (err) {
        if (this.stopping) return false;
        if (!isRetryable(err)) throw err;
        if (failures % 10 === 0) this.log(`cannot register yet: ${errorText(err)}; retrying`);
        await this.pause(backoffDelay({ baseMs: 250, maxMs: 5000 }, failures + 1));
      }
    }
    return false;
  }

  /** One registration at a time, whoever finds the machine forgotten (the heartbeat loop, the reporter). */
  private reregister(): Promise<boolean> {
    this.registering ??= this.register()
      .catch((e: unknown) => (this.log(`register failed: ${errorText(e)}`), false))
      .finally(() => (this.registering = null));
    return this.registering;
  }

  /**
   * Takes over what the previous run of the agent left (recover-attempts.ts). Outcomes recorded
   * before a crash are delivered before new work is taken, unless that takes longer than a
   * heartbeat period: the heartbeats that keep their leases must start by then.
   */
  private async recover(): Promise<void> {
    for (const r of await recoverAttempts(this.state, this.runnerDeps)) this.track(r);
    // What the previous run held for attempts that are not taken over (they ended, were abandoned) goes back.
    const freed = this.users!.forgetOthers();
    if (freed.length) this.debug(`released uid(s) ${freed.join(', ')} held by the previous run`);
    await this.sweepCgroups();
    await this.state.prune().catch((err) => this.log(`cannot prune old attempts: ${errorText(err)}`));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.deliverPending(), new Promise<void>((r) => (timer = setTimeout(r, this.settings!.heartbeatMs)))]);
    clearTimeout(timer);
  }

  /**
   * Kills and removes the attempt cgroups the previous run left that no re-attached attempt owns:
   * what outlived an attempt abandoned after a crash (a setsid child, a daemon), and the cgroups of
   * attempts that ended while no agent watched (empty; their usage is in their exit records).
   */
  private async sweepCgroups(): Promise<void> {
    if (!this.cgroups) return;
    // By the name of the cgroup each runs in: a recycled one is named after the attempt that made it.
    const keep = new Set([...this.runners.values()].filter((r) => r.live).map((r) => this.state.cgroupOf(r.a.attemptId)?.name ?? r.a.attemptId));
    const { removed, failed } = await this.cgroups.sweep(keep);
    if (removed.length)
      this.log(`removed the cgroups of ${removed.length} attempt(s) no longer running (${removed.join(', ')}), killing what was left in them`);
    for (const f of failed) this.log(`cannot remove the cgroups of ${f.attemptId}: ${f.error}; trying again at the next start`);
  }

  private async heartbeatLoop(): Promise<void> {
    let failures = 0;
    while (!this.stopping) {
      const s = this.settings!;
      const periodMs = this.periodMs();
      const sentAt = this.clock.now();
      const t0 = Date.now();
      try {
        // A dropped attempt is listed until its process is gone: the server keeps its resources
        // (its GPUs above all) held until then, so nothing new lands on them during the kill grace.
        // What the list knows of, taken with it (answers-known.ts).
        const knownAsOf = this.known.knownAsOf;
        const running = await Promise.all([...this.runners.values()].filter((r) => r.listed).map((r) => r.heartbeatItem()));
        const waitMs = Math.max(0, Math.min(MAX_WAIT_MS, periodMs));
        // Told it may be shed (a server of this protocol): say this agent waits out a Retry-After.
        const req = { running, waitMs, ...(s.shedding ? { acceptsShedding: true } : {}), ...(s.knownAsOf && knownAsOf !== null ? { knownAsOf } : {}) };
        const sent = this.known.sent();
        const res = await this.client.heartbeat(this.id!, req, this.loopAbort.signal).catch((err: unknown) => {
          this.known.settled(sent);
          throw err;
        });
        for (const a of res.assignments) this.accept(a);
        // Settled once its assignments are with their runners, before the next list is made.
        this.known.settled(sent, res.asOf);
        // The next heartbeat must come within the period this answer gives: the server judges the
        // machine's silence, and lasts its leases, by it.
        if (res.heartbeatMs !== undefined) this.given = { settings: s, periodMs: res.heartbeatMs };
        if (failures > 0) this.log(`heartbeat answered again after ${failures} failure(s)`);
        failures = 0;
        // The send time, not the answer's: the server renewed the lease no earlier than that.
        this.lastHeartbeatSentOk = sentAt;
        for (const k of res.kill) this.killFromServer(k.attemptId, k.reason, k.graceMs);
        void this.deliverPending();
        // A server that answers at once with nothing is not long-polling; keep to the period.
        if (res.kill.length === 0 && res.assignments.length === 0) await this.pause(Math.min(periodMs, res.heartbeatMs ?? periodMs) - (Date.now() - t0));
      } catch (err) {
        if (this.stopping) break;
        if (err instanceof UnknownMachine) {
          this.log(`${err.message}; registering again`);
          if (!(await this.reregister())) await this.pause(1000);
          continue;
        }
        const after = err instanceof AgentHttpError && err.retryable && err.retryAfterMs !== null ? retryAfterWaitMs(err.retryAfterMs, Math.random()) : null;
        if (after !== null && err instanceof AgentHttpError && err.code === 'heartbeat_shed') {
          // Shed by a server past its heartbeat budget (docs/failure-detection.md): it recorded the
          // arrival as a sign of life and allows for this wait, so it is not a failure, and the
          // silence that the disconnect grace counts starts over as after an answer.
          this.lastHeartbeatSentOk = sentAt;
          this.debug(`heartbeat shed by the server: the next in ${Math.round(after)} ms`);
          await this.pause(after);
          continue;
        }
        failures++;
        if (failures === 1 || failures % 10 === 0) this.log(`heartbeat failed (${failures} in a row): ${errorText(err)}`);
        // A Retry-After (a 503 busy, a 429) is waited out, or the backoff where that is longer.
        await this.pause(Math.max(after ?? 0, backoffDelay({ baseMs: 100, maxMs: Math.min(s.heartbeatMs, 6400) }, failures + 1)));
      }
    }
  }

  /** The heartbeat period now: a registration (again) starts over at its settings', until an answer gives another. */
  private periodMs(): number {
    const s = this.settings!;
    return this.given?.settings === s ? this.given.periodMs : s.heartbeatMs;
  }

  /**
   * The server cannot be reached. It may be restarting (then nothing is wrong with our work, and
   * killing it would throw away hours of GPU time), or this machine may be the one cut off (then
   * the server has given its attempts to others, and two copies run, safely: only the current one
   * can commit). Work goes on for `disconnectGraceMs`, and is killed only past that: the server
   * also says which attempts are stale as soon as a heartbeat gets through.
   */
  private checkLease(): void {
    if (this.stopping || !this.settings) return;
    // A longer period is a longer wait between answers, not silence: the grace grows with it as
    // the server's allowances do (silenceGrowthMs).
    const grow = silenceGrowthMs(this.periodMs(), this.settings.heartbeatMs);
    const cluster = (this.settings.disconnectGraceMs ?? this.settings.leaseMs) + grow;
    const silent = this.clock.now() - this.lastHeartbeatSentOk;
    // Each stage may set its own grace (disconnectGraceSeconds in its spec, like Nomad's
    // max_client_disconnect per group): a twelve-hour training run may wait out a long outage
    // where a cheap stage would rather be killed and run again elsewhere.
    // Silence first: whether a process ended on its own is a scan of /proc, not worth making
    // every second for every running attempt while heartbeats get through.
    const over = [...this.runners.values()].filter((r) => {
      const own = r.a.disconnectGraceSeconds;
      return r.live && silent > (own != null ? own * 1000 + grow : cluster) && !r.endedOnItsOwn();
    });
    if (over.length === 0) return;
    this.log(
      `no heartbeat got through for ${silent} ms; past their disconnect grace (the cluster's: ${cluster} ms), killing ${over.length} running attempt(s)`,
    );
    for (const r of over) r.kill(dropReason('server-unreachable', `server unreachable: no heartbeat for ${silent} ms`));
  }

  /** A report as sent: one with outcomes asks for the work they make room for, where the server offers that. */
  private asking(req: ReportRequest): ReportRequest {
    if (!req.completed.length || !this.settings?.reportAssignments) return req;
    return { ...req, assignments: true, ...(this.settings.startedAssignments && !this.acknowledgeAll ? { startAssignments: true } : {}) };
  }

  /** The same assignment can arrive twice (a resend, a reply that crossed a retry): run it once. */
  private accept(a: AssignmentWire): void {
    if (this.runners.has(a.attemptId) || this.stopping) return;
    this.track(AttemptRunner.accept(a, this.runnerDeps));
  }

  /** Known until it ends: listed in heartbeats, given kills, asked to deliver. */
  private track(r: AttemptRunner): void {
    this.runners.set(r.a.attemptId, r);
    void r.done.then(() => {
      if (this.runners.get(r.a.attemptId) === r) this.runners.delete(r.a.attemptId);
    });
  }

  private killFromServer(attemptId: string, reason: string, graceMs?: number): void {
    this.runners.get(attemptId)?.kill(dropReason('killed-by-server', reason), graceMs);
  }

  /** Every owed outcome at once, so that they share reports; one already under way is joined, not repeated. */
  private async deliverPending(): Promise<void> {
    if (this.halt.signal.aborted) return;
    await Promise.all([...this.runners.values()].map((r) => r.deliver()));
  }

  private pause(ms: number): Promise<void> {
    return ms <= 0 ? Promise.resolve() : sleep(ms, this.loopAbort.signal);
  }
}

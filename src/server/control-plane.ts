import { Metrics } from './metrics.js';
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import type { FastifyInstance } from 'fastify';
import { buildApi } from '../api/build-api.js';
import { TokenCache } from '../api/auth/token-cache.js';
import { HeartbeatLiveness } from '../api/heartbeat-liveness.js';
import { HeartbeatFleetPeriod } from '../api/heartbeat-fleet-period.js';
import type { Bus, BusMessage } from '../bus/bus.js';
import { Topic } from '../domain/topic.js';
import { MemoryBus } from '../bus/memory-bus.js';
import { type Clock, systemClock } from '../domain/clock.js';
import { OutboxRelay } from '../reconciler/outbox-relay.js';
import { RecentWorkload } from '../scheduler/recent-workload.js';
import { schedulerPass } from './scheduler-pass.js';
import { HandledHints } from './handled-hints.js';
import { openStore } from './open-store.js';
import type { Store } from '../store/store.js';
import { ArtifactStore } from '../artifacts/artifact-store.js';
import { Loop } from './loop.js';
import { artifactCollection } from './artifact-collection.js';
import { dutyLoop } from './duty-loop.js';
import { reconcilerLoops, type ReconcilerLoops } from './reconciler-loops.js';
import { JudgeGrace } from './judge-grace.js';
import { LeaderElection } from './leader-election.js';
import { SyncedClock } from './synced-clock.js';
import { NotLeaderError } from '../domain/errors.js';
import { artifactsDir, type ServerConfig } from './server-config.js';
import { loadDashboard } from './dashboard-files.js';
import type { Dashboard } from '../api/dashboard-routes.js';
import { PoolHistory } from '../api/pool-history.js';
import { StreamSlots } from '../api/stream-slots.js';
import { SignInCodes } from '../api/auth/sign-in-codes.js';
import { poolPoint, poolsNow } from '../api/pool-stats.js';
import { errorText } from '../lib/error-text.js';
import { resolve } from 'node:path';
import { Autoscaler } from '../autoscale/autoscale-loop.js';
import type { MachineProvider } from '../autoscale/provider.js';
import { poolProviders } from './pool-providers.js';
import { ScaleProvider } from '../autoscale/pool-template.js';
import { isLoopback } from '../api/contract/transport.js';
import { ensureTokenFile, joinTokenFile } from './token-file.js';

/** Connections waiting to be accepted (see start()). */
const LISTEN_BACKLOG = 8192;

export interface ControlPlane {
  app: FastifyInstance;
  store: Store;
  bus: Bus;
  config: ServerConfig;
  /** The reconciler is one loop per duty (docs/failure-detection.md, "The reconciler's loops"). */
  loops: { scheduler: Loop; reconciler: ReconcilerLoops; relay: Loop; pools: Loop; artifacts: Loop; autoscaler: Loop | null; liveness: Loop };
  /** The dashboard served at `/`, or why there is none (docs/dashboard.md). */
  dashboard: Dashboard;
  /** One-time codes that sign the dashboard in (`gantry up`'s link; docs/security.md). */
  signInCodes: SignInCodes;
  /** The address the API listens on, once started. */
  url: string;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The composition root: config → store, bus, loops, API. Nothing else constructs these, so a
 * test that builds a control plane runs exactly what `gantry server` runs.
 */
export async function createControlPlane(
  config: ServerConfig,
  deps: {
    store?: Store;
    bus?: Bus;
    clock?: Clock;
    random?: () => number;
    logger?: boolean | object;
    /** The machine provider of each autoscaled pool (default: poolProviders, from the pools' declared providers). */
    providers?: ReadonlyMap<string, MachineProvider>;
  } = {},
): Promise<ControlPlane> {
  mkdirSync(config.dataDir, { recursive: true });
  const random = deps.random ?? Math.random;
  const store = deps.store ?? (await openStore(config));
  // Several writers (PostgreSQL): several replicas may share the database. They read one clock,
  // the database's, and elect one leader to run the scheduler and reconciler (docs/replicas.md).
  const replicated = !store.capabilities.singleWriter;
  const synced =
    replicated && !deps.clock
      ? new SyncedClock(
          () => store.databaseNow(),
          undefined,
          (err) => appLog?.warn({ err: errorText(err) }, "clock: the database's could not be read; the offset in use kept"),
          (r) => appLog?.warn(r, "clock: a reading of the database's left out, its round trip too long (the offset in use kept)"),
        )
      : null;
  const clock = deps.clock ?? synced ?? systemClock;
  if (replicated) store.useClock(clock);
  const replicaId = config.replicaId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  let election: LeaderElection | null = null;
  // What the leader's loops write through: every transaction checks the term (Store.asLeader).
  const leaderStore = replicated ? store.asLeader(() => election?.current() ?? null) : store;
  const isLeader = () => (election ? election.current() !== null : true);
  // The bus may speak before the API (and its logger) exists: what it says then is not lost, only unlogged.
  let appLog: FastifyInstance['log'] | null = null;
  const bus = deps.bus ?? (config.busUrl ? await openNatsBus(config.busUrl, store, () => appLog) : new MemoryBus());
  // A bus in this process: its subscribers die with it, so outbox rows would protect no message
  // (a restart re-derives everything from the database); they go to it from memory instead.
  if (!config.busUrl && !deps.bus && process.env.GANTRY_OUTBOX_ROWS !== '1') store.keepOutboxInMemory();
  const shutdown = new AbortController();
  const artifacts = new ArtifactStore(artifactsDir(config));
  const tokens = new TokenCache(
    (hash) => store.tokenByHash({ hash }),
    () => clock.now(),
  );
  const metrics = new Metrics(
    store,
    () => clock.now(),
    config.pools.map((p) => p.name),
  );
  await metrics.start();
  // Idle heartbeats are written together, by every replica for the agents it serves (docs/failure-detection.md).
  const liveness = new HeartbeatLiveness();
  // The period heartbeats' answers give, grown with the fleet; counted by the liveness loop below.
  const period = new HeartbeatFleetPeriod(config);
  const poolHistory = new PoolHistory(config.poolSampleMs, 24 * 3_600_000);
  const dashboard = loadDashboard(config.dashboardDir);
  const signInCodes = new SignInCodes(() => clock.now());
  const app = await buildApi(
    {
      store,
      bus,
      clock,
      config,
      artifacts,
      random,
      shutdown: shutdown.signal,
      tokens,
      liveness,
      period,
      streams: new StreamSlots(config.streamsPerToken),
      signInCodes,
      replica: { id: replicaId, leader: isLeader },
      metrics,
      poolHistory,
      dashboard,
    },
    { logger: deps.logger },
  );
  appLog = app.log;
  if (dashboard.problem) app.log.warn({ dir: config.dashboardDir }, `dashboard: ${dashboard.problem}; / says so, the API is unaffected`);
  const logError = (loop: string) => (err: unknown) => {
    // Leadership moved while a pass ran: its write was refused whole; the new leader goes on.
    if (err instanceof NotLeaderError) app.log.info({ loop, term: err.term }, 'pass refused: this replica is no longer the leader');
    else app.log.error({ err, loop }, 'background pass failed');
  };

  // FGD's target workload: the GPU stages this replica's passes have seen (docs/scheduling.md).
  const recentWorkload = new RecentWorkload();
  /** When the scheduler loop's latest pass began (performance.now()): see `kick` below. */
  let loopPassStartedAt = Number.NEGATIVE_INFINITY;
  const scheduler = new Loop(
    'scheduler',
    async () => {
      loopPassStartedAt = performance.now();
      const end = metrics.passSeconds.startTimer({ where: 'loop' });
      // A source of its own a pass: on PostgreSQL its reads without arguments in one round trip.
      const r = await schedulerPass(leaderStore.placementSource(), clock, {
        leaseMs: config.leaseMs,
        preemptionCooldownMs: config.preemptionCooldownMs,
        gpuPolicy: config.gpuPolicy,
        recentWorkload,
        holds: config.pools.length > 0,
      });
      end();
      metrics.placements.inc(r.placed);
      if (r.preempted) metrics.preemptions.inc(r.preempted);
      metrics.gangReservedGpus.set(r.gangHeldGpus ?? 0);
      if (r.placed || r.skipped) app.log.debug(r, 'scheduler pass');
      if (r.more) scheduler.kick();
    },
    config.schedulerIntervalMs,
    logError('scheduler'),
    random,
  );
  // After a restart every heartbeat looks old: the silence was the server's, not the agents'.
  // Judge no machine or lease until agents have had a full loss period to reconnect (counted from
  // here, and again from start(); a control plane driven by a test's clock is never started).
  // Again from each gain of the lease (`gained` below): the rows a new leader reads were written
  // by every replica's liveness loop, and a predecessor that lost its lease for being overloaded
  // had likely not flushed its agents' arrivals either; judged at once, its live fleet was lost
  // and back every leader change (branch `collapse`, docs/failure-detection.md, "After a leader change").
  const grace = new JudgeGrace(config.lostAfterMs, clock.now());
  const reconciler = reconcilerLoops({
    store: leaderStore,
    clock,
    config,
    log: app.log,
    onError: logError,
    random,
    judgeFrom: () => grace.judgeFrom,
    heard: (machineId) => liveness.heardAt(machineId),
    removeLegacyDirs: async (ids) => {
      for (const id of ids) await artifacts.removeLegacyDir(id);
    },
  });
  const reconcilerEach = Object.values(reconciler);
  // The pools page's history (GET /v1/pools/history): every replica samples what it reads, for
  // whoever looks at it; one read of machines and queue counts per sample, whatever the backlog.
  const pools = new Loop(
    'pools',
    async () => {
      const at = clock.now();
      poolHistory.add({ at, pools: (await poolsNow(store, at, { reasons: false })).map(poolPoint) });
    },
    config.poolSampleMs,
    logError('pools'),
    random,
  );
  // Artifact collection (docs/rerun.md): outputs no job names any more, the size budget, and
  // files a crash left behind; not held by the restart grace, as it judges no machine.
  const collector = dutyLoop(
    artifactCollection(leaderStore, artifacts, clock, config),
    ({ collection: r, strays: s }) => {
      if (s && (s.collected || s.restored || s.removedAside))
        app.log.warn(
          s,
          'artifact files a crash left behind: collected (no row named them), restored (renamed aside, still named), removed (renamed aside, not needed)',
        );
      if (r.deleted || r.release.length)
        app.log.info(
          { deleted: r.deleted, freedBytes: r.freedBytes, released: r.release.map((x) => `${x.jobId}/${x.stage}`), bytesAfter: r.bytesAfter },
          'artifacts collected',
        );
      if (r.budgetBytes !== null && r.bytesAfter > r.budgetBytes)
        app.log.warn(
          { bytes: r.bytesAfter, budget: r.budgetBytes },
          'artifact store over its budget: what is left is named by jobs not ended or reused by reruns',
        );
    },
    { onError: logError, random },
  );
  // The autoscaler (issue 30, docs/autoscaling.md "The loop"): on the leader, beside the scheduler,
  // only when pools are declared; each pass re-reads the database, so a new leader carries on.
  let autoscaler: Loop | null = null;
  let providers: ReadonlyMap<string, MachineProvider> = new Map();
  if (config.pools.length > 0) {
    const log = app.log;
    providers = deps.providers ?? poolProviders(config, log);
    const decide = new Autoscaler({
      store: leaderStore,
      pools: config.pools,
      providers,
      clock,
      intervalMs: config.autoscaleIntervalMs,
      gpuPolicy: config.gpuPolicy,
      recentWorkload,
      preemptionCooldownMs: config.preemptionCooldownMs,
      log,
      // The machines it starts join as `gantry up`'s local agents do: with the join token kept in
      // the data directory (made once, again if revoked), at this server's address (the operator's,
      // GANTRY_AUTOSCALE_SERVER_URL, for machines on other hosts: the listening one is 127.0.0.1).
      join: async () => ({
        server: config.autoscaleServerUrl ?? cp.url,
        joinToken: (await ensureTokenFile(store, joinTokenFile(config.dataDir), 'join', 'join (autoscaled machines and local agents)', clock.now())).token,
        ...(process.env.GANTRY_CA ? { ca: resolve(process.env.GANTRY_CA) } : {}),
      }),
    });
    autoscaler = new Loop('autoscaler', async () => metrics.autoscalePass(await decide.pass()), config.autoscaleIntervalMs, logError('autoscaler'), random);
  }
  const leaderLoops = [scheduler, ...reconcilerEach, collector, ...(autoscaler ? [autoscaler] : [])];
  // Rows younger than three relay periods are their writer's to mark (its pass comes within 1.2).
  const outbox = new OutboxRelay(store, bus, clock, logError('relay'), 3 * config.relayIntervalMs);
  const relay = new Loop('relay', async () => void (await outbox.pass()), config.relayIntervalMs, logError('relay'), random);
  // Every 0.4 × heartbeatMs, jittered to at most 0.48: a heartbeat's arrival is in the database
  // within half a period, the margin detection allows for (docs/failure-detection.md). Each pass
  // also counts the fleet, for the period the next heartbeats' answers give.
  const livenessLoop = new Loop(
    'liveness',
    async () => {
      await liveness.flush(store, clock.now());
      await period.refresh(store, clock.now());
    },
    0.4 * config.heartbeatMs,
    logError('liveness'),
    random,
  );

  // This process's placement hints that a pass before their commit handled, by the id the relay
  // publishes them under: their delivery here wakes no loop pass (below).
  const handledHints = new HandledHints();
  // Published at once after each commit; marked published by the relay's next pass, in bulk.
  store.onOutbox((messages) => {
    outbox.published(messages, (id, since) => handledHints.note(id, since));
    if (outbox.unmarked >= 1000) relay.kick();
  });
  // Placement where room was made: in the transaction that readied stages or freed capacity
  // (docs/scheduling.md); installed by start(), so a control plane a test drives without starting
  // places only when the test runs the loop. With several writers (PostgreSQL) only the leader's
  // transactions place, one pass at a time. The loop is woken by the hints no pass handled
  // (docs/scheduling.md, "Which hints wake the loop"): every other replica's (over the bus), and
  // this one's whose transaction placed nothing before its commit (a submit's, one that found a
  // pass running, a follower's), whose pass failed or left `more`. A pass that ran to its end read
  // what its transaction wrote: the loop's pass after it read the same again and placed nothing,
  // one round trip of seven statements a report on PostgreSQL.
  // A loop pass that began while the handling transaction was open read without its writes, and
  // its transaction's pass read without what that loop pass was woken for (a commit after its
  // snapshot: another replica's, or one that found the pass running): neither placed what the
  // two together made room for, and the loop's reads are not SERIALIZABLE, so nothing refuses it.
  const kick = (msg: BusMessage) => {
    const since = handledHints.take(msg.id);
    if (since === undefined || loopPassStartedAt >= since) scheduler.kick();
  };
  bus.subscribe(Topic.poolReady, kick);
  bus.subscribe(Topic.capacityFreed, kick);
  const placeWithin = () =>
    store.placeBeforeCommit(
      async (source) => {
        // A follower places nothing: its hints are left to the leader's loop (false: not handled).
        if (!isLeader()) return false;
        const end = metrics.passSeconds.startTimer({ where: 'transaction' });
        const r = await schedulerPass(source, clock, {
          leaseMs: config.leaseMs,
          preemptionCooldownMs: config.preemptionCooldownMs,
          gpuPolicy: config.gpuPolicy,
          recentWorkload,
          holds: config.pools.length > 0,
        });
        end();
        metrics.placements.inc(r.placed);
        if (r.preempted) metrics.preemptions.inc(r.preempted);
        metrics.gangReservedGpus.set(r.gangHeldGpus ?? 0);
        if (r.placed || r.skipped) app.log.debug(r, 'scheduler pass (in a transaction)');
        if (r.more) scheduler.kick();
        return !r.more;
      },
      (err) => {
        logError('scheduler')(err);
        scheduler.kick();
      },
    );

  const cp: ControlPlane = {
    app,
    store,
    bus,
    config,
    loops: { scheduler, reconciler, relay, pools, artifacts: collector, autoscaler, liveness: livenessLoop },
    dashboard,
    signInCodes,
    url: '',
    async start() {
      // Thousands of agents connect at once when the server (re)starts: Node's default backlog of
      // 511 overflowed with a fleet of 1,000 (bench:fleet), each dropped SYN costing its agent 1 s,
      // then 3 s, 7 s of retransmission. The kernel caps it at net.core.somaxconn.
      const address = await app.listen({ host: config.host, port: config.port, backlog: LISTEN_BACKLOG });
      cp.url = address.replace('[::1]', '127.0.0.1');
      grace.restart(clock.now());
      if (
        config.autoscaleServerUrl === null &&
        config.pools.some((p) => p.autoscale.provider === ScaleProvider.command) &&
        isLoopback(new URL(cp.url).hostname)
      )
        app.log.warn(
          { url: cp.url },
          'autoscaler: machines a command provider starts are told to join at this loopback address, which only this host reaches: set GANTRY_AUTOSCALE_SERVER_URL to the address they reach the server at',
        );
      relay.start();
      livenessLoop.start();
      if (config.poolSampleMs > 0) pools.start();
      placeWithin();
      if (!replicated) {
        for (const loop of leaderLoops) loop.start();
        return;
      }
      await synced?.start();
      if (synced?.last) app.log.info(synced.last, "clock: the database's, read every 10 s (offset from this host's, and the reading's error bound)");
      election = new LeaderElection(
        store,
        clock,
        replicaId,
        config.leaderTtlMs,
        {
          gained: (t) => {
            // Nomad's heartbeat timers reset on a leader election, for the same reason (see the grace above), bounded (judge-grace.ts).
            grace.gained(clock.now());
            app.log.info({ replica: replicaId, term: t.term, judgeFrom: grace.judgeFrom }, 'this replica is the leader: scheduler and reconciler running');
            for (const loop of leaderLoops) loop.start();
          },
          lost: (why) => {
            app.log.warn({ replica: replicaId, why }, 'this replica is no longer the leader: scheduler and reconciler stopped');
            for (const loop of leaderLoops) void loop.stop();
          },
          slow: (c) => app.log.warn({ replica: replicaId, ...c, ttlMs: config.leaderTtlMs }, 'leader lease: a claim came late (its gap and its parts)'),
        },
        logError('leader'),
        random,
      );
      election.start();
    },
    async stop() {
      shutdown.abort();
      await election?.stop();
      synced?.stop();
      const loopsStopped = Promise.all([...leaderLoops.map((loop) => loop.stop()), relay.stop(), pools.stop()]);
      // The local provider's agents stop with the server (they would with --exit-with-parent
      // anyway), and a command provider's script in flight is ended: the autoscaler's pass waits on
      // it, and would hold the shutdown for the script's timeout (300 s). Closed again once the
      // loops have stopped, for an agent a pass started meanwhile.
      const closeProviders = () => Promise.all([...new Set(providers.values())].map((p) => p.close()));
      await closeProviders();
      await loopsStopped;
      await closeProviders();
      await app.close();
      // The heartbeats answered last: written, so that a replica taking over these agents does not
      // find them older than they are.
      await livenessLoop.stop();
      await liveness.flush(store, clock.now()).catch(logError('liveness'));
      await bus.close();
      await store.close();
    },
  };
  return cp;
}

/**
 * NATS between replicas (docs/replicas.md). The server starts whether or not NATS
 * answers: until it does, wake-ups stay in the outbox and the loops' periodic passes do the work.
 */
async function openNatsBus(url: string, store: Store, log: () => FastifyInstance['log'] | null): Promise<Bus> {
  const { NatsBus } = await import('../bus/nats-bus.js');
  const servers = NatsBus.servers(url);
  return new NatsBus(servers, {
    installation: await store.installationId(),
    onError: (err) => log()?.warn({ err: errorText(err), servers }, 'NATS: not available; wake-ups wait in the outbox, periodic passes carry the work'),
    onState: (state) => (state === 'disconnected' ? log()?.warn({ servers }, 'NATS connection lost') : log()?.info({ servers, state }, 'NATS connection up')),
  });
}

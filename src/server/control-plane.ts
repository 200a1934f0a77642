import { mkdirSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { buildApi } from '../api/build-api.js';
import { TokenCache } from '../api/auth/token-cache.js';
import type { Bus } from '../bus/bus.js';
import { Topic } from '../bus/bus.js';
import { MemoryBus } from '../bus/memory-bus.js';
import { type Clock, systemClock } from '../domain/clock.js';
import { OutboxRelay } from '../reconciler/outbox-relay.js';
import { reconcilePass } from '../reconciler/reconcile.js';
import { schedulerPass } from './scheduler-pass.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { Store } from '../store/store.js';
import { ArtifactStore } from './artifact-store.js';
import { Loop } from './loop.js';
import { artifactsDir, databaseFile, type ServerConfig } from './server-config.js';

export interface ControlPlane {
  app: FastifyInstance;
  store: Store;
  bus: Bus;
  config: ServerConfig;
  loops: { scheduler: Loop; reconciler: Loop; relay: Loop };
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
  deps: { store?: Store; bus?: Bus; clock?: Clock; random?: () => number; logger?: boolean | object } = {},
): Promise<ControlPlane> {
  mkdirSync(config.dataDir, { recursive: true });
  const clock = deps.clock ?? systemClock;
  const random = deps.random ?? Math.random;
  const store = deps.store ?? (await openSqliteStore(databaseFile(config)));
  const bus = deps.bus ?? new MemoryBus();
  const shutdown = new AbortController();
  const artifacts = new ArtifactStore(artifactsDir(config));
  const tokens = new TokenCache((hash) => store.tokenByHash({ hash }), () => clock.now());
  const app = await buildApi({ store, bus, clock, config, artifacts, random, shutdown: shutdown.signal, tokens }, { logger: deps.logger });
  const logError = (loop: string) => (err: unknown) => app.log.error({ err, loop }, 'background pass failed');

  const scheduler = new Loop(
    'scheduler',
    async () => {
      const r = await schedulerPass(store, clock, { leaseMs: config.leaseMs });
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
  let judgeFrom = clock.now() + config.lostAfterMs;
  const repairCursor = { repair: null as string | null };
  const reconciler = new Loop(
    'reconciler',
    async () => {
      if (clock.now() < judgeFrom) return;
      const r = await reconcilePass(
        store,
        clock,
        config,
        random,
        async (ids) => {
          for (const id of ids) await artifacts.remove(id);
        },
        repairCursor,
      );
      for (const m of r.machines) app.log.warn(m, 'machine health changed');
      if (r.lostAttempts.length) app.log.warn({ attempts: r.lostAttempts }, 'attempts lost');
      if (r.repairedJobs.length) app.log.warn({ jobs: r.repairedJobs }, 'jobs re-evaluated by the reconciler');
      if (r.expiredJobs.length) app.log.info({ jobs: r.expiredJobs.length }, 'ended jobs past retention deleted');
    },
    config.reconcileIntervalMs,
    logError('reconciler'),
    random,
  );
  const outbox = new OutboxRelay(store, bus, clock, logError('relay'));
  const relay = new Loop('relay', async () => void (await outbox.pass()), config.relayIntervalMs, logError('relay'), random);

  // Published at once after each commit; marked published by the relay's next pass, in bulk.
  store.onOutbox((messages) => {
    outbox.published(messages);
    if (outbox.unmarked >= 1000) relay.kick();
  });
  // Placement where room was made: with one writer, in the transaction that readied stages or freed
  // capacity (docs/scheduling.md); installed by start(), so a control plane a test drives without
  // starting places only when the test runs the loop. With several writers, the loop is woken.
  let placesInTransactions = false;
  const kick = () => {
    if (!placesInTransactions) scheduler.kick();
  };
  bus.subscribe(Topic.poolReady, kick);
  bus.subscribe(Topic.capacityFreed, kick);
  const placeWithin = () =>
    store.placeBeforeCommit(
      async (source) => {
        const r = await schedulerPass(source, clock, { leaseMs: config.leaseMs });
        if (r.placed || r.skipped) app.log.debug(r, 'scheduler pass (in a transaction)');
        if (r.more) scheduler.kick();
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
    loops: { scheduler, reconciler, relay },
    url: '',
    async start() {
      const address = await app.listen({ host: config.host, port: config.port });
      cp.url = address.replace('[::1]', '127.0.0.1');
      judgeFrom = clock.now() + config.lostAfterMs;
      placesInTransactions = placeWithin();
      relay.start();
      scheduler.start();
      reconciler.start();
    },
    async stop() {
      shutdown.abort();
      await Promise.all([scheduler.stop(), reconciler.stop(), relay.stop()]);
      await app.close();
      await bus.close();
      await store.close();
    },
  };
  return cp;
}

import { createWriteStream, readFileSync } from 'node:fs';
import { isLoopback } from '../api/contract/transport.js';
import { join, resolve } from 'node:path';
import type { Command } from '@commander-js/extra-typings';
import { lockDataDir } from './data-dir-lock.js';
import { makeServerFilesPrivate } from './server-private-files.js';
import {
  artifactsBudgetFrom,
  checkServerConfig,
  logCapsFrom,
  outputPolicyFrom,
  databaseLabel,
  defaultServerConfig,
  reconcilerEnv,
  type ServerConfig,
} from './server-config.js';
import { errorText } from '../lib/error-text.js';
import { ValidationError } from '../spec/validation-error.js';
import { parseClusterFile } from './cluster-file.js';
import { ScaleProvider } from '../autoscale/pool-template.js';
import { DEFAULT_SHARE_POLICY, isServerSharePolicy, isSharePolicy, SERVER_SHARE_POLICIES, type SharePolicyName } from '../scheduler/share-policies.js';
import { PRIVATE_UMASK, privateMode } from '../lib/private-mode.js';
import { makeDirectories } from '../agent/disk/mode-tightener.js';

export interface ServerFlags {
  dataDir: string;
  port: string;
  host: string;
  tlsCert?: string;
  tlsKey?: string;
  database?: string;
  bus?: string;
  /** A cluster file whose `pools:` the autoscaler grows and shrinks (`gantry server --pools`); default $GANTRY_POOLS. */
  pools?: string;
}

/** `--database` or GANTRY_DATABASE_URL: a postgres:// URL, checked here so that a typo is said before anything starts. */
export function databaseUrlFrom(flag: string | undefined): string | null {
  const url = flag ?? process.env.GANTRY_DATABASE_URL;
  if (!url) return null;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`--database ${url}: not a URL; give postgres://USER@HOST:PORT/DATABASE (or leave it out for SQLite in the data directory)`);
  }
  if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:')
    throw new Error(`--database ${u.protocol}//…: only postgres:// is supported (SQLite is the default without --database)`);
  return url;
}

function busUrlFrom(flag: string | undefined): string | null {
  const url = flag ?? process.env.GANTRY_BUS_URL;
  if (!url) return null;
  const protocol = /^([a-z]+):\/\//.exec(url)?.[1];
  if (protocol !== 'nats') throw new Error(`--bus ${url}: only nats://HOST:PORT[,nats://…] is supported (the in-process bus is the default without --bus)`);
  return url;
}

export function serverConfigFrom(flags: ServerFlags): ServerConfig {
  const port = Number(flags.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port ${flags.port} is not a port number`);
  // Timing settings from the environment, for tests and for operators who tune detection.
  const env = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
  const over: Partial<ServerConfig> = {};
  const set = <K extends keyof ServerConfig>(k: K, v: ServerConfig[K] | undefined) => {
    if (v !== undefined && !Number.isNaN(v)) over[k] = v;
  };
  set('heartbeatMs', env('GANTRY_HEARTBEAT_MS'));
  set('maxHeartbeatsPerSecond', env('GANTRY_MAX_HEARTBEATS_PER_SECOND'));
  set('leaseMs', env('GANTRY_LEASE_MS'));
  set('suspectAfterMs', env('GANTRY_SUSPECT_AFTER_MS'));
  set('lostAfterMs', env('GANTRY_LOST_AFTER_MS'));
  set('ackTimeoutMs', env('GANTRY_ACK_TIMEOUT_MS'));
  set('killGraceMs', env('GANTRY_KILL_GRACE_MS'));
  set('preemptionCooldownMs', env('GANTRY_PREEMPTION_COOLDOWN_MS'));
  set('disconnectGraceMs', env('GANTRY_DISCONNECT_GRACE_MS'));
  set('rateLimitPerSecond', env('GANTRY_RATE_LIMIT'));
  set('agentRateLimitPerSecond', env('GANTRY_AGENT_RATE_LIMIT'));
  set('streamsPerToken', env('GANTRY_STREAMS_PER_TOKEN'));
  set('leaderTtlMs', env('GANTRY_LEADER_TTL_MS'));
  set('poolSampleMs', env('GANTRY_POOL_SAMPLE_MS'));
  set('autoscaleIntervalMs', env('GANTRY_AUTOSCALE_INTERVAL_MS'));
  for (const [key, name] of Object.entries(reconcilerEnv) as [keyof typeof reconcilerEnv, string][]) set(key, env(name));
  if (process.env.GANTRY_DASHBOARD_DIR) over.dashboardDir = resolve(process.env.GANTRY_DASHBOARD_DIR);
  if (process.env.GANTRY_REPLICA_ID) over.replicaId = process.env.GANTRY_REPLICA_ID;
  if (process.env.GANTRY_ARTIFACTS_DIR) over.artifactsDir = process.env.GANTRY_ARTIFACTS_DIR;
  if (process.env.GANTRY_AUTOSCALE_SERVER_URL) over.autoscaleServerUrl = process.env.GANTRY_AUTOSCALE_SERVER_URL;
  const auditDays = env('GANTRY_AUDIT_RETENTION_DAYS');
  if (auditDays !== undefined) set('auditKeepMs', auditDays * 86_400_000);
  const tokenDays = env('GANTRY_TOKEN_RETENTION_DAYS');
  if (tokenDays !== undefined) set('tokenKeepMs', tokenDays * 86_400_000);
  const hours = env('GANTRY_RETENTION_HOURS');
  if (hours !== undefined) set('retentionMs', hours * 3_600_000);
  over.artifactsMaxBytes = artifactsBudgetFrom(process.env.GANTRY_ARTIFACTS_MAX_BYTES);
  over.logCaps = logCapsFrom(process.env.GANTRY_LOG_HEAD_BYTES, process.env.GANTRY_LOG_TAIL_BYTES);
  over.outputs = outputPolicyFrom(process.env);
  const grace = env('GANTRY_ARTIFACTS_GRACE_SECONDS');
  if (grace !== undefined) set('artifactsGraceMs', grace * 1000);
  const gcEvery = env('GANTRY_ARTIFACTS_GC_SECONDS');
  if (gcEvery !== undefined) set('artifactsGcIntervalMs', gcEvery * 1000);
  if (process.env.GANTRY_HEALTH_OPEN === '0') over.openHealth = false;
  const timing = process.env.GANTRY_HEARTBEAT_TIMING;
  if (timing !== undefined && timing !== '' && timing !== '0' && timing !== '1')
    throw new Error(`GANTRY_HEARTBEAT_TIMING must be 1 (heartbeat answers carry x-gantry-timing) or 0; got ${JSON.stringify(timing)}`);
  if (timing === '1') over.heartbeatTiming = true;
  const gpuPolicy = gpuPolicyFrom(process.env.GANTRY_GPU_POLICY);
  if (gpuPolicy !== undefined) over.gpuPolicy = gpuPolicy;
  const poolsFile = flags.pools ?? process.env.GANTRY_POOLS;
  if (poolsFile) over.pools = poolsFrom(poolsFile);
  const config = defaultServerConfig({
    dataDir: flags.dataDir,
    databaseUrl: databaseUrlFrom(flags.database),
    busUrl: busUrlFrom(flags.bus),
    port,
    host: flags.host,
    tls: tlsFrom(flags),
    ...over,
  });
  checkServerConfig(config);
  // Tokens must not cross a network in clear: another address than loopback needs TLS.
  if (!config.tls && !isLoopback(config.host) && process.env.GANTRY_ALLOW_INSECURE_HTTP !== '1') {
    throw new Error(
      `--host ${config.host} without TLS would take tokens in clear from the network: give --tls-cert and --tls-key (docs/security.md), or set GANTRY_ALLOW_INSECURE_HTTP=1 if the network is trusted`,
    );
  }
  return config;
}

/** `--pools FILE` (GANTRY_POOLS): the `pools:` of a cluster file (its machines, if any, are `gantry up`'s business). */
function poolsFrom(file: string): ServerConfig['pools'] {
  const { pools } = parseClusterFile(file);
  if (pools.length === 0)
    throw new ValidationError([{ path: `${file}#/pools`, message: '--pools names a cluster file with no pools: section (docs/autoscaling.md)' }]);
  return pools;
}

/** GANTRY_GPU_POLICY: a named GPU placement policy, refused before anything starts when it names none. */
export function gpuPolicyFrom(value: string | undefined): SharePolicyName | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  const name = value.trim();
  if (isSharePolicy(name) && !isServerSharePolicy(name))
    throw new Error(
      `GANTRY_GPU_POLICY=${name}: ${name} is one of the FGD paper's peers, for gantry sim only (it needs state the server does not keep); give one of ${SERVER_SHARE_POLICIES.join(', ')} (default ${DEFAULT_SHARE_POLICY})`,
    );
  if (!isServerSharePolicy(name))
    throw new Error(
      `GANTRY_GPU_POLICY=${name}: no such GPU placement policy; give one of ${SERVER_SHARE_POLICIES.join(', ')} (default ${DEFAULT_SHARE_POLICY})`,
    );
  return name;
}

function tlsFrom(flags: ServerFlags): ServerConfig['tls'] {
  const certFile = flags.tlsCert ?? process.env.GANTRY_TLS_CERT;
  const keyFile = flags.tlsKey ?? process.env.GANTRY_TLS_KEY;
  if (!certFile && !keyFile) return null;
  if (!certFile || !keyFile) throw new Error('TLS needs both --tls-cert and --tls-key');
  const read = (flag: string, file: string) => {
    try {
      return readFileSync(file, 'utf8');
    } catch (err) {
      throw new Error(`${flag} ${file}: ${errorText(err)}`);
    }
  };
  return { cert: read('--tls-cert', certFile), key: read('--tls-key', keyFile) };
}

/**
 * Starts the control plane (API, scheduler, reconciler, outbox relay) and returns it. `holdsAgents`:
 * `gantry up`, whose agents keep their directories in the data directory (server-private-files.ts).
 */
export async function startServer(config: ServerConfig, opts: { logFile?: string; holdsAgents?: boolean } = {}) {
  try {
    return await startControlPlane(config, opts);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') {
      throw new Error(`port ${config.port} on ${config.host} is in use (another Gantry?); choose another with --port`);
    }
    throw err;
  }
}

async function startControlPlane(config: ServerConfig, opts: { logFile?: string; holdsAgents?: boolean }) {
  // Loaded here, not at the top: `gantry agent` and the client commands share this binary, and an
  // agent that carried the control plane's code would be twice the size, and every fork it makes
  // to start a stage costs in proportion to its size.
  const { createControlPlane } = await import('./control-plane.js');
  const { ChaosBus, parseChaosSettings } = await import('../bus/chaos-bus.js');
  const { MemoryBus } = await import('../bus/memory-bus.js');
  // Under `gantry up` each directory made on the way is passable: its agents' stages go through it to theirs.
  makeDirectories(config.dataDir, privateMode(opts.holdsAgents ? 'up-data-dir' : 'server-data-dir'));
  // Before anything is opened: the log and the database keep the mode they have (docs/containment.md, "Private files").
  const modes = makeServerFilesPrivate(config, { holdsAgents: opts.holdsAgents ?? false });
  const unlock = lockDataDir(config.dataDir);
  const logger = opts.logFile ? { level: config.logLevel, stream: createWriteStream(opts.logFile, { flags: 'a' }) } : { level: config.logLevel };
  // GANTRY_BUS_CHAOS turns on the misbehaving bus, for fault-injection tests (see src/bus/chaos-bus.ts).
  const chaos = process.env.GANTRY_BUS_CHAOS;
  const bus = chaos ? new ChaosBus(new MemoryBus({ dedupe: false }), parseChaosSettings(chaos)) : undefined;
  const cp = await createControlPlane(config, { logger, bus });
  if (modes.changed.length > 0)
    cp.app.log.info({ files: modes.changed.length }, 'made files of the data directory private (owner-only) that an earlier version left open');
  for (const problem of modes.problems) cp.app.log.warn({ problem }, 'cannot make a file of the data directory private');
  try {
    // The first admin token, where the CLI finds it (GANTRY_DATA_DIR): two commands stay two commands.
    const { ensureTokenFile, adminTokenFile } = await import('./token-file.js');
    const admin = await ensureTokenFile(cp.store, adminTokenFile(config.dataDir), 'admin', 'admin (made by the server at its first start)', Date.now());
    if (admin.created) cp.app.log.info({ file: adminTokenFile(config.dataDir) }, 'admin token written (readable by its owner only)');
    await cp.start();
  } catch (err) {
    await cp.stop().catch(() => {});
    unlock();
    throw err;
  }
  const stop = cp.stop.bind(cp);
  cp.stop = async () => {
    await stop();
    unlock();
  };
  if (bus) {
    cp.app.log.warn({ chaos }, 'bus chaos is ON: messages are dropped, duplicated, delayed and reordered on purpose');
    const report = setInterval(() => cp.app.log.info({ chaos: bus.stats }, 'bus chaos so far'), 5000);
    report.unref();
  }
  return cp;
}

export function serverCommand(program: Command): void {
  program
    .command('server')
    .description('Run the control plane alone (API, scheduler, reconciler); agents join with `gantry agent`')
    .option('--data-dir <dir>', 'where the database and artifacts live', './.gantry')
    .option('--port <n>', 'port to listen on', '7070')
    .option('--host <addr>', 'address to listen on (0.0.0.0 for agents on other hosts: needs TLS)', '127.0.0.1')
    .option('--tls-cert <file>', 'certificate (PEM) to serve HTTPS with; default $GANTRY_TLS_CERT')
    .option('--tls-key <file>', 'its private key (PEM); default $GANTRY_TLS_KEY')
    .option(
      '--database <url>',
      'postgres://… to keep the state in PostgreSQL (replicas share one); default $GANTRY_DATABASE_URL, else SQLite in the data directory',
    )
    .option('--bus <url>', 'nats://… to carry wake-ups over NATS between replicas; default $GANTRY_BUS_URL, else in this process')
    .option(
      '--pools <file>',
      'a cluster file whose pools: the leader autoscales (starts machines when stages wait, stops idle ones); default $GANTRY_POOLS; docs/autoscaling.md',
    )
    .option('--json', 'print the address and data directory as one JSON line once listening')
    .addHelpText(
      'after',
      '\nThe web dashboard is served at / (sign in with a team or admin token; docs/dashboard.md).\nTimings and the reconciler\'s loops (intervals, ages, batch sizes) come from GANTRY_* environment variables: docs/failure-detection.md.\nGPU placement policy: GANTRY_GPU_POLICY=fgd (default), fgd-paper, best-fit, packing or dotprod; docs/scheduling.md, "Placement of shares".\nHow much of a stage\'s log is kept: its first GANTRY_LOG_HEAD_BYTES (56Mi) and last GANTRY_LOG_TAIL_BYTES (8Mi); docs/agent.md, "Logs".\nAutoscaling: --pools FILE (a cluster file\'s pools:, e.g. examples/autoscale-cluster.yaml); the leader decides every GANTRY_AUTOSCALE_INTERVAL_MS (10000); machines started elsewhere join at GANTRY_AUTOSCALE_SERVER_URL (default: the address it listens on); docs/autoscaling.md.\n\nExample:\n  gantry server --data-dir /var/lib/gantry --host 0.0.0.0 --tls-cert /etc/gantry/cert.pem --tls-key /etc/gantry/key.pem\n',
    )
    .action(async (flags) => {
      // Whatever the umask it was started with, what the server makes is its user's only (the database, tokens, artifacts).
      process.umask(PRIVATE_UMASK);
      const config = serverConfigFrom(flags);
      // A local pool's agents keep their directories in the data directory, as `gantry up`'s do.
      const cp = await startServer(config, { holdsAgents: config.pools.some((p) => p.autoscale.provider === ScaleProvider.local) });
      const { adminTokenFile } = await import('./token-file.js');
      const tokenFile = resolve(adminTokenFile(config.dataDir));
      if (flags.json) process.stdout.write(JSON.stringify({ url: cp.url, dataDir: resolve(config.dataDir), adminTokenFile: tokenFile }) + '\n');
      process.stderr.write(
        `gantry server listening on ${cp.url} (data in ${config.dataDir}, state in ${databaseLabel(config)}, admin token in ${tokenFile}, log: stdout)\n`,
      );
      process.stderr.write(
        cp.dashboard.problem
          ? `dashboard: not available: ${cp.dashboard.problem}\n`
          : `dashboard: ${cp.url}/ (sign in with a team or admin token; gantry token create --team T --name N makes one)\n`,
      );
      const stop = async () => {
        await cp.stop();
        process.exit(0);
      };
      process.once('SIGINT', () => void stop());
      process.once('SIGTERM', () => void stop());
    });
}

export const serverLogFile = (dataDir: string) => join(dataDir, 'server.log');

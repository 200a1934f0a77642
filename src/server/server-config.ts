import type { PoolTemplate } from '../autoscale/pool-template.js';
import { DEFAULT_SHARE_POLICY, type SharePolicyName } from '../scheduler/share-policies.js';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseMemoryBytes } from '../spec/quantity.js';
import { DEFAULT_OUTPUT_POLICY, type OutputPolicy } from '../domain/output-limits.js';
import { errorText } from '../lib/error-text.js';
import { DEFAULT_LOG_CAPS, type LogCaps } from '../store/log-caps.js';

/**
 * Every timing the control plane uses, in one place. The failure-detection formula in
 * docs/failure-detection.md is written in these names.
 */
export interface ServerConfig {
  dataDir: string;
  /** postgres://… : the store is that PostgreSQL database (several replicas may share it). Null: SQLite in the data directory. */
  databaseUrl: string | null;
  /** nats://… : wake-ups travel over NATS, between replicas. Null: in this process only. */
  busUrl: string | null;
  /** Where stage outputs are kept; null: `artifacts/` in the data directory. Replicas must share one. */
  artifactsDir: string | null;
  /** This replica's name in the leader lease and logs; default host:pid:random. */
  replicaId: string | null;
  /** The leader lease runs out this long after its last renewal; renewed every third of it (docs/replicas.md). */
  leaderTtlMs: number;
  host: string;
  port: number;
  /** Agents heartbeat this often; a heartbeat renews every lease the machine holds. */
  heartbeatMs: number;
  /**
   * The whole fleet's heartbeats a second: past `heartbeatMs × this` machines, each heartbeat's
   * answer gives a longer period (machines / this), and every allowance for silence grows with it
   * (docs/failure-detection.md, "A period that grows with the fleet"; Nomad's
   * max_heartbeats_per_second). 0: the period never grows.
   */
  maxHeartbeatsPerSecond: number;
  /** A lease not renewed for this long expires; the agent kills its own processes after the same. */
  leaseMs: number;
  /** Silent this long: no new placements on the machine. */
  suspectAfterMs: number;
  /** Silent this long: the machine is lost and its attempts go elsewhere. */
  lostAfterMs: number;
  /** An assignment not started within this is taken back and placed again. */
  ackTimeoutMs: number;
  /** Jobs unchanged this long are re-evaluated by the advancer (a safety net). */
  repairAfterMs: number;
  /** Ended jobs are deleted (rows, logs, references to outputs) this long after they ended. */
  retentionMs: number;
  // The reconciler's loops (docs/failure-detection.md, "The reconciler's loops"): one per duty,
  // each on its own interval (jittered ×0.8–1.2), on the leader only.
  /** The lost-machines loop's period: how late, at worst, a silent machine is declared lost. */
  lostMachinesIntervalMs: number;
  /** The lost-attempts loop's period: expired leases and assignments never acknowledged. */
  lostAttemptsIntervalMs: number;
  /** The queue-timeout loop's period, and how many overdue stages it fails a pass. */
  queueTimeoutIntervalMs: number;
  queueTimeoutBatch: number;
  /** The repair loop's period, how many jobs it may move a pass, and how many it looks at a pass. */
  repairIntervalMs: number;
  repairBatch: number;
  repairScan: number;
  /** The retention loop's period, and how many ended jobs it deletes a pass. */
  retentionIntervalMs: number;
  retentionBatch: number;
  /** The pruning loop's period; published outbox rows are kept this long, Idempotency-Keys that long. */
  pruneIntervalMs: number;
  outboxKeepMs: number;
  idempotencyKeepMs: number;
  /** Audit rows are deleted this long after they began (docs/security.md, "The audit log"): GANTRY_AUDIT_RETENTION_DAYS, default 90. */
  auditKeepMs: number;
  /** Revoked and expired tokens are deleted this long after they ended (docs/security.md): GANTRY_TOKEN_RETENTION_DAYS, default 30. */
  tokenKeepMs: number;
  /** The artifact store's size budget in bytes: past it, ended jobs' outputs no other job names are released, oldest first (docs/rerun.md). Null: none. */
  artifactsMaxBytes: number | null;
  /** Collection spares a blob written this recently (an upload of the same content under way). */
  artifactsGraceMs: number;
  /** What a stage may leave as outputs unless it asks, the most it may ask, and the bound on a team's stored outputs (docs/security.md, "Output limits"). */
  outputs: OutputPolicy;
  /** How often collection runs (on the leader). */
  artifactsGcIntervalMs: number;
  /** How often (and once after start) collection reads the whole blob tree for files a crash left behind. */
  straySweepIntervalMs: number;
  /** Temporary files of uploads older than this are deleted by collection: far past any upload's pause. */
  uploadTempKeepMs: number;
  /** TERM, then this long, then KILL. */
  killGraceMs: number;
  /** A stage preempted less than this long ago is not preempted again (no thrashing). */
  preemptionCooldownMs: number;
  /** How GPU stages choose a machine and GPUs (GANTRY_GPU_POLICY; docs/scheduling.md, "Placement of shares"): FGD by default. */
  gpuPolicy: SharePolicyName;
  /** An agent that cannot reach the server keeps its stages running this long before killing
   *  them: a server restart or upgrade costs no work. In a partition where the server is up, its
   *  work is placed elsewhere after `lostAfterMs`, and the stale copy runs until the agent is back
   *  (then it is told to kill it) or this passes; fencing makes the overlap safe. */
  disconnectGraceMs: number;
  schedulerIntervalMs: number;
  relayIntervalMs: number;
  /** Largest job spec accepted. */
  bodyLimitBytes: number;
  logLevel: string;
  /** Requests a second per token (on average; 5 times that at once): a person's or a script's (admin, team, join). 0: no limit. */
  rateLimitPerSecond: number;
  /** The same for a machine's credential: an agent under load sends hundreds a second. */
  agentRateLimitPerSecond: number;
  /** Streams (events, followed logs) a token may hold open at once on this server (GANTRY_STREAMS_PER_TOKEN); 0: no cap. */
  streamsPerToken: number;
  /** The health check answers without a token (a load balancer's probe carries none); false: it needs one too. */
  openHealth: boolean;
  /** Each heartbeat's answer says when the server read it, began it and answered it, on the host's clock (`x-gantry-timing`; GANTRY_HEARTBEAT_TIMING=1): for a fleet bench on the same host (docs/agent.md). */
  heartbeatTiming: boolean;
  /** PEM certificate and key: the API speaks HTTPS (docs/security.md). Null: plain HTTP, which only a loopback address may take. */
  tls: { cert: string; key: string } | null;
  /** The built dashboard served at `/` (Vite's output; default dist/web of this package, GANTRY_DASHBOARD_DIR). */
  dashboardDir: string;
  /** How much of an attempt's log is kept: its first headBytes and last tailBytes (GANTRY_LOG_HEAD_BYTES, GANTRY_LOG_TAIL_BYTES; docs/agent.md, "Logs"). */
  logCaps: LogCaps;
  /** The pools page's history: a sample of every pool this often, kept in memory for a day (GANTRY_POOL_SAMPLE_MS). 0: none. */
  poolSampleMs: number;
  /**
   * The autoscaled pools (issue 30, docs/autoscaling.md): a cluster file's `pools:` (`gantry server
   * --pools FILE`, GANTRY_POOLS; `gantry up` reads its --cluster file's). Empty: no autoscaler runs.
   */
  pools: PoolTemplate[];
  /** How often the autoscaler decides, on the leader (GANTRY_AUTOSCALE_INTERVAL_MS, default 10 s). */
  autoscaleIntervalMs: number;
  /**
   * The address the machines the autoscaler starts join at, as they reach this server
   * (GANTRY_AUTOSCALE_SERVER_URL). Null: the address it listens on, which is 127.0.0.1 for a
   * loopback host and for 0.0.0.0 alike: enough for the local provider, not for machines elsewhere.
   */
  autoscaleServerUrl: string | null;
}

/** The dashboard this package built: dist/web beside dist/server (from the sources, under tsx or vitest: the same dist/web). */
export const defaultDashboardDir = (): string => fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? '../../dist/web' : '../web', import.meta.url));

/**
 * The whole fleet's heartbeats a second by default, by store (docs/failure-detection.md, "A period
 * that grows with the fleet"). SQLite: 0.13–0.15 ms of the server's CPU a heartbeat at 10,000
 * agents, 2,500 a second keeps one server under half a core (docs/throughput.md, "A fleet of
 * agents"). PostgreSQL: 0.5 ms of the servers' CPU a heartbeat at 5,000 agents on two replicas
 * (three round trips, where SQLite's are calls), and PostgreSQL's own besides; at 2,500 a second
 * the pool's queue held heartbeats for seconds, machines went suspect by the thousand and the stopped
 * one was not found lost within 30 s, where 1,250 held (p99 209 ms idle, lost within its bound).
 * Fleets under 5,000 (SQLite) or 2,500 machines (PostgreSQL) keep the configured period.
 */
export function defaultMaxHeartbeatsPerSecond(databaseUrl: string | null): number {
  return databaseUrl ? 1250 : 2500;
}

export function defaultServerConfig(over: Partial<ServerConfig> = {}): ServerConfig {
  return {
    dataDir: './.gantry',
    databaseUrl: null,
    busUrl: null,
    replicaId: null,
    artifactsDir: null,
    leaderTtlMs: 5000,
    host: '127.0.0.1',
    port: 7070,
    heartbeatMs: 2000,
    maxHeartbeatsPerSecond: defaultMaxHeartbeatsPerSecond(over.databaseUrl ?? null),
    leaseMs: 10_000,
    suspectAfterMs: 5000,
    lostAfterMs: 10_000,
    ackTimeoutMs: 15_000,
    killGraceMs: 5000,
    preemptionCooldownMs: 300_000,
    gpuPolicy: DEFAULT_SHARE_POLICY,
    pools: [],
    autoscaleIntervalMs: 10_000,
    autoscaleServerUrl: null,
    disconnectGraceMs: 5 * 60_000,
    repairAfterMs: 30_000,
    retentionMs: 7 * 24 * 3_600_000,
    lostMachinesIntervalMs: 1000,
    lostAttemptsIntervalMs: 1000,
    queueTimeoutIntervalMs: 1000,
    queueTimeoutBatch: 100,
    repairIntervalMs: 1000,
    repairBatch: 100,
    repairScan: 2000,
    retentionIntervalMs: 1000,
    retentionBatch: 100,
    pruneIntervalMs: 1000,
    outboxKeepMs: 3_600_000,
    idempotencyKeepMs: 24 * 3_600_000,
    auditKeepMs: 90 * 24 * 3_600_000,
    tokenKeepMs: 30 * 24 * 3_600_000,
    artifactsMaxBytes: null,
    logCaps: DEFAULT_LOG_CAPS,
    artifactsGraceMs: 60_000,
    outputs: DEFAULT_OUTPUT_POLICY,
    artifactsGcIntervalMs: 60_000,
    straySweepIntervalMs: 24 * 3_600_000,
    uploadTempKeepMs: 24 * 3_600_000,
    schedulerIntervalMs: 1000,
    relayIntervalMs: 1000,
    bodyLimitBytes: 1024 * 1024,
    logLevel: 'info',
    tls: null,
    openHealth: true,
    heartbeatTiming: false,
    rateLimitPerSecond: 50,
    agentRateLimitPerSecond: 2000,
    streamsPerToken: 32,
    dashboardDir: defaultDashboardDir(),
    poolSampleMs: 15_000,
    ...over,
  };
}

/** Timings that contradict each other would make healthy machines look dead, and a reconciler limit of 0 would spin or stall its loop: refuse them. */
export function checkServerConfig(c: ServerConfig): void {
  const problems: string[] = [];
  if (!(c.heartbeatMs > 0)) problems.push('heartbeat must be positive');
  // A heartbeat that changes nothing is not written if the last one is younger than half a period
  // (machineHeartbeat's renewAfterMs), and a poll is held up to a period: written heartbeats and
  // lease renewals can be 1.5 periods apart, and detection must allow for that.
  if (!(1.5 * c.heartbeatMs < c.suspectAfterMs))
    problems.push(`1.5 × heartbeat (${1.5 * c.heartbeatMs} ms) must be shorter than suspect-after (${c.suspectAfterMs} ms)`);
  if (!(c.suspectAfterMs <= c.lostAfterMs)) problems.push(`suspect-after (${c.suspectAfterMs} ms) must not exceed lost-after (${c.lostAfterMs} ms)`);
  if (!(1.5 * c.heartbeatMs < c.leaseMs)) problems.push(`1.5 × heartbeat (${1.5 * c.heartbeatMs} ms) must be shorter than the lease (${c.leaseMs} ms)`);
  if (!(c.maxHeartbeatsPerSecond >= 0)) problems.push(`max heartbeats a second (${c.maxHeartbeatsPerSecond}) must not be negative (0: the period never grows)`);
  if (!(c.killGraceMs >= 0)) problems.push('kill grace must not be negative');
  if (!(c.preemptionCooldownMs >= 0)) problems.push('the preemption cool-down must not be negative');
  if (!(c.disconnectGraceMs >= c.leaseMs)) problems.push(`disconnect grace (${c.disconnectGraceMs} ms) must not be shorter than the lease (${c.leaseMs} ms)`);
  if (!(c.poolSampleMs === 0 || c.poolSampleMs >= 100)) problems.push(`the pool sample interval (${c.poolSampleMs} ms) must be 0 (none) or at least 100 ms`);
  if (!(c.autoscaleIntervalMs >= 100))
    problems.push(`the autoscaler's interval (GANTRY_AUTOSCALE_INTERVAL_MS, ${c.autoscaleIntervalMs} ms) must be at least 100 ms`);
  if (c.autoscaleServerUrl !== null && !/^https?:\/\/[^/\s]+/.test(c.autoscaleServerUrl))
    problems.push(`the address autoscaled machines join at (GANTRY_AUTOSCALE_SERVER_URL, ${c.autoscaleServerUrl}) must be an http:// or https:// URL`);
  if (!(c.leaderTtlMs >= 300)) problems.push(`the leader lease (${c.leaderTtlMs} ms) must be at least 300 ms`);
  if (!(Number.isInteger(c.streamsPerToken) && c.streamsPerToken >= 0))
    problems.push(`streams per token (${c.streamsPerToken}) must be a whole number, 0 for no cap`);
  if (!(c.artifactsGraceMs >= 0)) problems.push('the artifacts grace must not be negative');
  if (!(c.artifactsGcIntervalMs > 0)) problems.push('the artifact collection interval must be positive');
  if (!(c.logCaps.headBytes >= 1024)) problems.push(`the log's head (GANTRY_LOG_HEAD_BYTES, ${c.logCaps.headBytes} bytes) must be at least 1 KiB`);
  if (!(c.logCaps.tailBytes >= 1024)) problems.push(`the log's tail (GANTRY_LOG_TAIL_BYTES, ${c.logCaps.tailBytes} bytes) must be at least 1 KiB`);
  if (c.outputs.stageDefault.bytes > c.outputs.stageMax.bytes)
    problems.push(
      `the default output bytes of a stage (GANTRY_OUTPUTS_DEFAULT_BYTES, ${c.outputs.stageDefault.bytes}) must not exceed the most (GANTRY_OUTPUTS_MAX_BYTES, ${c.outputs.stageMax.bytes})`,
    );
  if (c.outputs.stageDefault.files > c.outputs.stageMax.files)
    problems.push(
      `the default output files of a stage (GANTRY_OUTPUTS_DEFAULT_FILES, ${c.outputs.stageDefault.files}) must not exceed the most (GANTRY_OUTPUTS_MAX_FILES, ${c.outputs.stageMax.files})`,
    );
  problems.push(...reconcilerProblems(c));
  if (problems.length) throw new Error(`inconsistent settings: ${problems.join('; ')}`);
}

/**
 * The reconciler's settings an operator may set, each from its environment variable (read by
 * `gantry server` and `gantry up`; docs/failure-detection.md lists them with their defaults).
 */
export const reconcilerEnv = {
  repairAfterMs: 'GANTRY_REPAIR_AFTER_MS',
  lostMachinesIntervalMs: 'GANTRY_LOST_MACHINES_INTERVAL_MS',
  lostAttemptsIntervalMs: 'GANTRY_LOST_ATTEMPTS_INTERVAL_MS',
  queueTimeoutIntervalMs: 'GANTRY_QUEUE_TIMEOUT_INTERVAL_MS',
  queueTimeoutBatch: 'GANTRY_QUEUE_TIMEOUT_BATCH',
  repairIntervalMs: 'GANTRY_REPAIR_INTERVAL_MS',
  repairBatch: 'GANTRY_REPAIR_BATCH',
  repairScan: 'GANTRY_REPAIR_SCAN',
  retentionIntervalMs: 'GANTRY_RETENTION_INTERVAL_MS',
  retentionBatch: 'GANTRY_RETENTION_BATCH',
  pruneIntervalMs: 'GANTRY_PRUNE_INTERVAL_MS',
  outboxKeepMs: 'GANTRY_OUTBOX_KEEP_MS',
  idempotencyKeepMs: 'GANTRY_IDEMPOTENCY_KEEP_MS',
  straySweepIntervalMs: 'GANTRY_STRAY_SWEEP_INTERVAL_MS',
  uploadTempKeepMs: 'GANTRY_UPLOAD_TEMP_KEEP_MS',
} as const satisfies Partial<Record<keyof ServerConfig, string>>;

/** The settings that are numbers (intervals, ages, batches). */
type NumericSetting = { [K in keyof ServerConfig]-?: ServerConfig[K] extends number ? K : never }[keyof ServerConfig];

/** What is wrong with the reconciler's settings: a zero interval would spin, a zero batch would never finish its work. */
function reconcilerProblems(c: ServerConfig): string[] {
  const problems: string[] = [];
  const positive = (key: NumericSetting, what: string) => {
    if (!(c[key] > 0)) problems.push(`${key} (${what}) must be positive, not ${c[key]}`);
  };
  const count = (key: 'queueTimeoutBatch' | 'repairBatch' | 'repairScan' | 'retentionBatch', what: string) => {
    if (!(Number.isInteger(c[key]) && c[key] > 0)) problems.push(`${key} (${what}) must be a whole number above 0, not ${c[key]}`);
  };
  positive('lostMachinesIntervalMs', "the lost-machines loop's period");
  positive('lostAttemptsIntervalMs', "the lost-attempts loop's period");
  positive('queueTimeoutIntervalMs', "the queue-timeout loop's period");
  positive('repairIntervalMs', "the repair loop's period");
  positive('retentionIntervalMs', "the retention loop's period");
  positive('pruneIntervalMs', "the pruning loop's period");
  positive('straySweepIntervalMs', 'how often the blob tree is swept for strays');
  positive('repairAfterMs', 'how long a job is unchanged before repair looks at it');
  positive('retentionMs', 'how long ended jobs are kept');
  positive('idempotencyKeepMs', 'how long an Idempotency-Key answers retries');
  positive('auditKeepMs', 'how long audit rows are kept (GANTRY_AUDIT_RETENTION_DAYS)');
  positive('tokenKeepMs', 'how long revoked and expired tokens are kept (GANTRY_TOKEN_RETENTION_DAYS)');
  positive('uploadTempKeepMs', "how long an upload's temporary file is kept");
  if (!(c.outboxKeepMs >= 0)) problems.push(`outboxKeepMs (how long published outbox rows are kept) must not be negative, not ${c.outboxKeepMs}`);
  count('queueTimeoutBatch', 'overdue stages failed a pass');
  count('repairBatch', 'jobs repair may move a pass');
  count('repairScan', 'jobs repair looks at a pass');
  count('retentionBatch', 'ended jobs deleted a pass');
  return problems;
}

/** Where the store is, for logs and messages: the SQLite file, or the PostgreSQL URL without its password. */
export function databaseLabel(c: ServerConfig): string {
  if (!c.databaseUrl) return databaseFile(c);
  const u = new URL(c.databaseUrl);
  if (u.password) u.password = '***';
  return u.toString();
}

export const databaseFile = (c: ServerConfig) => join(c.dataDir, 'gantry.db');
/** GANTRY_ARTIFACTS_MAX_BYTES: bytes, or a quantity with a suffix ("500Gi", "2T"); empty or 0: no budget. */
export function artifactsBudgetFrom(text: string | undefined): number | null {
  if (text === undefined || text.trim() === '' || text.trim() === '0') return null;
  try {
    return parseMemoryBytes(/^\d+$/.test(text.trim()) ? Number(text.trim()) : text.trim());
  } catch (err) {
    throw new Error(`GANTRY_ARTIFACTS_MAX_BYTES=${text}: ${errorText(err)} (give bytes, or a size such as 500Gi)`);
  }
}

/**
 * GANTRY_LOG_HEAD_BYTES and GANTRY_LOG_TAIL_BYTES: how much of an attempt's log is kept, in bytes or
 * a size ("56Mi"); unset, the default (56 MiB and 8 MiB).
 */
export function logCapsFrom(head: string | undefined, tail: string | undefined): LogCaps {
  const size = (name: string, text: string | undefined, dflt: number) => {
    if (text === undefined || text.trim() === '') return dflt;
    try {
      return parseMemoryBytes(/^\d+$/.test(text.trim()) ? Number(text.trim()) : text.trim());
    } catch (err) {
      throw new Error(`${name}=${text}: ${errorText(err)} (give bytes, or a size such as 56Mi)`);
    }
  };
  return {
    headBytes: size('GANTRY_LOG_HEAD_BYTES', head, DEFAULT_LOG_CAPS.headBytes),
    tailBytes: size('GANTRY_LOG_TAIL_BYTES', tail, DEFAULT_LOG_CAPS.tailBytes),
  };
}

/** Stage outputs: GANTRY_ARTIFACTS_DIR (replicas share one, docs/replicas.md), else `artifacts/` in the data directory. */
export const artifactsDir = (c: ServerConfig) => c.artifactsDir ?? join(c.dataDir, 'artifacts');

/**
 * The output limits from the environment (docs/security.md, "Output limits"): a stage's default
 * and most, in bytes (a size such as 20Gi) and files, and a team's bound in bytes (empty or 0:
 * none). Anything unset keeps DEFAULT_OUTPUT_POLICY's.
 */
export function outputPolicyFrom(env: Record<string, string | undefined>): OutputPolicy {
  const bytes = (name: string, positive: boolean): number | null | undefined => {
    const text = env[name]?.trim();
    if (text === undefined || text === '') return undefined;
    if (text === '0' && !positive) return null;
    try {
      return parseMemoryBytes(/^\d+$/.test(text) ? Number(text) : text);
    } catch (err) {
      throw new Error(`${name}=${text}: ${errorText(err).replace(/^memory /, '')} (give bytes, or a size such as 20Gi)`);
    }
  };
  const files = (name: string): number | undefined => {
    const text = env[name]?.trim();
    if (text === undefined || text === '') return undefined;
    const n = Number(text);
    if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${name}=${text}: give a whole number of files, at least 1`);
    return n;
  };
  const d = DEFAULT_OUTPUT_POLICY;
  const team = bytes('GANTRY_TEAM_OUTPUTS_MAX_BYTES', false);
  return {
    stageDefault: {
      bytes: bytes('GANTRY_OUTPUTS_DEFAULT_BYTES', true) ?? d.stageDefault.bytes,
      files: files('GANTRY_OUTPUTS_DEFAULT_FILES') ?? d.stageDefault.files,
    },
    stageMax: { bytes: bytes('GANTRY_OUTPUTS_MAX_BYTES', true) ?? d.stageMax.bytes, files: files('GANTRY_OUTPUTS_MAX_FILES') ?? d.stageMax.files },
    teamMaxBytes: team === undefined ? d.teamMaxBytes : team,
  };
}

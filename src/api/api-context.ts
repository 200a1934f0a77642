import type { Bus } from '../bus/bus.js';
import type { OutputPolicy } from '../domain/output-limits.js';
import type { Clock } from '../domain/clock.js';
import type { ArtifactStore } from '../artifacts/artifact-store.js';
import type { Store } from '../store/store.js';
import type { LogCaps } from '../store/log-caps.js';
import type { TokenCache } from './auth/token-cache.js';
import type { HeartbeatLiveness } from './heartbeat-liveness.js';
import type { HeartbeatFleetPeriod } from './heartbeat-fleet-period.js';
import type { StreamSlots } from './stream-slots.js';
import type { SignInCodes } from './auth/sign-in-codes.js';
import type { PoolHistory } from './pool-history.js';
import type { Dashboard } from './dashboard-routes.js';
import type { PoolTemplate } from '../autoscale/pool-template.js';

/** What the HTTP layer needs from the rest of the control plane. */
export interface ApiContext {
  store: Store;
  bus: Bus;
  clock: Clock;
  config: ApiSettings;
  artifacts: ArtifactStore;
  random: () => number;
  /** Aborted when the server shuts down, so held long-polls return at once. */
  shutdown: AbortSignal;
  /** Tokens by hash, shared by the authentication hook and the routes that revoke. */
  tokens: TokenCache;
  /** Idle heartbeats kept in memory and flushed by the control plane (heartbeat-liveness.ts);
   *  absent (tests that build the API alone): every heartbeat older than half a period is written. */
  liveness?: HeartbeatLiveness;
  /** The heartbeat period grown with the fleet, counted by the control plane's liveness loop
   *  (heartbeat-fleet-period.ts); absent (tests that build the API alone): the configured period. */
  period?: HeartbeatFleetPeriod;
  /** The streams each token holds open (events, followed logs), capped (stream-slots.ts). */
  streams: StreamSlots;
  /** One-time sign-in codes for the dashboard (`gantry up`'s link): sign-in-codes.ts. */
  signInCodes: SignInCodes;
  /** This replica: its id, and whether it runs the scheduler and reconciler now (docs/replicas.md). */
  replica: { id: string; leader(): boolean };
  /** The Prometheus metrics (/metrics); absent in tests that build the API alone. */
  metrics?: { text(): Promise<string> };
  /** The pools over time, sampled by the control plane (GET /v1/pools/history); absent: only the present. */
  poolHistory?: PoolHistory;
  /** The built dashboard, served at `/`; absent (tests that build the API alone): no `/` at all. */
  dashboard?: Dashboard;
}

/**
 * The server's settings that the HTTP layer reads: a part of ServerConfig (src/server/server-config.ts),
 * which the control plane passes whole; declared here so that api/ does not import the server above it.
 */
export interface ApiSettings {
  heartbeatMs: number;
  /** The fleet's heartbeats a second the period is grown to hold (docs/failure-detection.md); 0: never grown. */
  maxHeartbeatsPerSecond: number;
  suspectAfterMs: number;
  lostAfterMs: number;
  lostMachinesIntervalMs: number;
  leaseMs: number;
  killGraceMs: number;
  disconnectGraceMs: number;
  bodyLimitBytes: number;
  rateLimitPerSecond: number;
  agentRateLimitPerSecond: number;
  openHealth: boolean;
  /** Heartbeat answers carry `x-gantry-timing` (agent-heartbeat-route.ts). */
  heartbeatTiming: boolean;
  tls: { cert: string; key: string } | null;
  /** The artifact store's size budget in bytes (null: none) and how long a fresh file is spared (docs/rerun.md). */
  artifactsMaxBytes: number | null;
  artifactsGraceMs: number;
  /** How much of an attempt's log is kept: its head and its tail (src/store/log-caps.ts). */
  logCaps: LogCaps;
  /** What stages and teams may leave as outputs (docs/security.md, "Output limits"). */
  outputs: OutputPolicy;
  /** The autoscaled pools (docs/autoscaling.md): what GET /v1/autoscale and explain show of them. Empty: none. */
  pools: readonly PoolTemplate[];
}

import type { Bus } from '../bus/bus.js';
import type { Clock } from '../domain/clock.js';
import type { ArtifactStore } from '../artifacts/artifact-store.js';
import type { ServerConfig } from '../server/server-config.js';
import type { Store } from '../store/store.js';
import type { TokenCache } from './auth/token-cache.js';
import type { Metrics } from '../server/metrics.js';

/** What the HTTP layer needs from the rest of the control plane. */
export interface ApiContext {
  store: Store;
  bus: Bus;
  clock: Clock;
  config: ServerConfig;
  artifacts: ArtifactStore;
  random: () => number;
  /** Aborted when the server shuts down, so held long-polls return at once. */
  shutdown: AbortSignal;
  /** Tokens by hash, shared by the authentication hook and the routes that revoke. */
  tokens: TokenCache;
  /** This replica: its id, and whether it runs the scheduler and reconciler now (docs/replicas.md). */
  replica: { id: string; leader(): boolean };
  /** The Prometheus metrics (/metrics); absent in tests that build the API alone. */
  metrics?: Metrics;
}

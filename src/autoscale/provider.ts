import type { MachineTemplate } from './pool-template.js';

/**
 * What the autoscaler asks of whatever starts and stops machines (issue 30): `local` (gantry agent
 * processes on this host) and `command` (an executable you name: docs/autoscaling.md,
 * "Providers"). Both are idempotent by machine name: asked to start a name that runs already, or
 * to stop one that is gone, they answer as if they had just done it, so a decision repeated after
 * a restart or a leader change never starts a machine twice.
 */
export interface StartRequest {
  pool: string;
  template: MachineTemplate;
  /** One per machine to start: the name its agent is to register with (`--name`). */
  names: string[];
  /** The API address its agent joins (`--server`). */
  server: string;
  /** The join token to pass on (GANTRY_JOIN_TOKEN): the agent trades it for a credential of its own. */
  joinToken: string;
  /** The CA the agent trusts for the server, PEM path, when the server speaks TLS. */
  ca?: string;
}

export interface StartedMachine {
  name: string;
  /** What the provider calls it (an instance id), for the operator and the stop. */
  providerId?: string;
}

export interface MachineProvider {
  /** The machines it started (or found running) of `names`; a name missing from the answer was not started (the row is failed, reported). Throws when it could start nothing and says why. */
  start(req: StartRequest): Promise<StartedMachine[]>;
  /** Stops these machines (gone ones count as stopped); returns the names it has stopped. */
  stop(req: { pool: string; machines: { name: string; providerId: string | null }[] }): Promise<string[]>;
  /**
   * Stops what it owns in this process when the server stops (local: its agent children; command:
   * a request in flight, whose promise rejects with ProviderClosedError).
   */
  close(): Promise<void>;
}

/**
 * A request ended because the provider was closed (the server is stopping), not refused: the loop
 * fails no machine for it, and leaves the rows to be asked again by the next process (providers are
 * idempotent by name).
 */
export class ProviderClosedError extends Error {
  override readonly name = 'ProviderClosedError';
}

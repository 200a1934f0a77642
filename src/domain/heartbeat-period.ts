/**
 * A heartbeat period that grows with the fleet (docs/failure-detection.md, "A period that grows
 * with the fleet"). Each heartbeat is an HTTP request whose cost is mostly Node's and Fastify's,
 * not the database's: past some size the only lever left is fewer of them. As Nomad does
 * (`max_heartbeats_per_second`: each client's TTL is the number of clients over that rate, never
 * under `min_heartbeat_ttl`), the server tells each agent its next period in the heartbeat's
 * answer, long enough for the whole fleet to send at most `maxHeartbeatsPerSecond`, never shorter
 * than the configured `heartbeatMs`.
 *
 * A longer period means a machine is heard from less often, so every allowance for silence grows
 * with it: a machine told period `p` is suspect, lost, and its leases run out `silenceGrowthMs(p)`
 * later than at the configured period. Each machine's row records the period it was last told
 * (the reaper judges each machine by its own), so a fleet that shrinks never has a machine judged
 * by a period shorter than the one it is on.
 */

/** The longest period ever given: the wire's longest hold (`HeartbeatRequest.waitMs`). */
export const MAX_HEARTBEAT_PERIOD_MS = 30_000;

/** Periods are whole tenths of a second: a fleet that gains one machine does not move them. */
const STEP_MS = 100;

export interface HeartbeatTimings {
  /** The configured period: what every agent gets while the fleet is small. */
  heartbeatMs: number;
  suspectAfterMs: number;
  lostAfterMs: number;
  leaseMs: number;
  /** The whole fleet's heartbeats a second the period is grown to hold; 0: the period never grows. */
  maxHeartbeatsPerSecond: number;
}

/** The period for a fleet of `machines` (those expected to heartbeat): `machines / rate`, in steps, within [heartbeatMs, 30 s]. */
export function fleetHeartbeatMs(machines: number, t: Pick<HeartbeatTimings, 'heartbeatMs' | 'maxHeartbeatsPerSecond'>): number {
  if (!(t.maxHeartbeatsPerSecond > 0)) return t.heartbeatMs;
  const spread = Math.ceil((machines * 1000) / t.maxHeartbeatsPerSecond / STEP_MS) * STEP_MS;
  return Math.max(t.heartbeatMs, Math.min(MAX_HEARTBEAT_PERIOD_MS, spread));
}

/**
 * How much later than at the configured period a machine on period `periodMs` is judged: two
 * periods' growth. A live machine's row can be two periods old (with the liveness loop stalled, a
 * heartbeat writes the row only once it is 1.5 periods old, and the next comes a period later), so
 * growing every allowance by twice the period's growth keeps the margins of the configured timings.
 */
export function silenceGrowthMs(periodMs: number | null, heartbeatMs: number): number {
  return periodMs === null ? 0 : 2 * Math.max(0, periodMs - heartbeatMs);
}

/** What a machine on period `periodMs` is allowed: silent this long it is suspect, then lost; its attempts' leases this long. */
export function silenceAllowances(periodMs: number | null, t: Omit<HeartbeatTimings, 'maxHeartbeatsPerSecond'>) {
  const grow = silenceGrowthMs(periodMs, t.heartbeatMs);
  return { suspectAfterMs: t.suspectAfterMs + grow, lostAfterMs: t.lostAfterMs + grow, leaseMs: t.leaseMs + grow };
}

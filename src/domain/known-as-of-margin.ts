/**
 * How much earlier than an agent's `knownAsOf` a running attempt must have started for its absence
 * from the heartbeat's list to count (docs/failure-detection.md, "What a heartbeat's list knows"):
 * the start and `knownAsOf` may be read off two replicas' clocks, each kept within its reading's
 * error bound of the database's (12 ms measured; docs/replicas.md).
 */
export const KNOWN_AS_OF_MARGIN_MS = 250;

/**
 * Why the agent stopped caring about an attempt: the server decided (or will), so it is killed if
 * it runs and nothing is reported. Decisions are taken on the kind; `detail` is what people read
 * (and what the journal keeps, as before typed reasons).
 */
type DropKind =
  /** The server says the attempt is no longer current (a 409, a report item answered `stale`). */
  | 'stale'
  /** The server said kill (a cancel, a preemption, a drain): its reason is the detail. */
  | 'killed-by-server'
  /** No heartbeat got through for longer than the attempt's disconnect grace. */
  | 'server-unreachable'
  /** This agent is stopping and kills what it runs. */
  | 'agent-stopping'
  /** Its pid could not be recorded: a crash of the agent would leave it untracked. */
  | 'pid-unrecorded'
  /** Re-attached after a restart, it ended with no status written: how cannot be known. */
  | 'exit-unknown'
  /** Its outcome could not be delivered for too long, or was refused for good. */
  | 'undeliverable'
  /** Its acknowledgement or outcome was answered `refused`. */
  | 'refused';

export interface DropReason {
  kind: DropKind;
  detail: string;
}

export function dropReason(kind: DropKind, detail: string): DropReason {
  return { kind, detail };
}

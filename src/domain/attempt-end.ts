/**
 * How an attempt ended, as a kind that code decides on (the advancer, by the table in
 * attempt-end-policy.ts) and a detail that people read. Declared here for the domain and, with no
 * import of it, in the contract (src/api/contract/attempt-end.ts) for the wire;
 * src/api/contract-agreement.ts fails the build when the two lists differ.
 */
export const AttemptEndKind = {
  /** The process exited by itself, with any exit code (0 with no detail is the one success). Said by the agent. */
  exited: 'exited',
  /** A signal ended it and nobody asked for it (a crash; the kernel's OOM killer outside a cgroup). Said by the agent. */
  signaled: 'signaled',
  /** Its timeoutSeconds passed and the agent killed it. Said by the agent. */
  timeout: 'timeout',
  /** The command could not be started (no such file, not executable). Said by the agent. */
  spawnFailed: 'spawn-failed',
  /** Its inputs could not be fetched before it started. Said by the agent. */
  inputsFailed: 'inputs-failed',
  /** Its outputs could not be uploaded after it exited 0. Said by the agent. */
  outputsFailed: 'outputs-failed',
  /** Killed because it was told to or lost the server past its grace (the agent); its job was canceled (the control plane). */
  killed: 'killed',
  /** Its cgroup's OOM counter moved (the containment issue). Said by the agent. */
  oomKilled: 'oom-killed',
  /** Its machine or its lease was lost, or an operator stopped it at once (drain --now). Said by the control plane. */
  lost: 'lost',
  /** A higher priority stage took its place. Said by the control plane. */
  preempted: 'preempted',
} as const;
export type AttemptEndKind = (typeof AttemptEndKind)[keyof typeof AttemptEndKind];
export const attemptEndKinds: readonly AttemptEndKind[] = Object.values(AttemptEndKind);

/** An attempt's end: the kind decides, the detail (null when the kind and exit code say it all) explains. */
export interface AttemptEnd {
  kind: AttemptEndKind;
  detail: string | null;
}

/**
 * One duty of the reconciler (lost machines, lost attempts, queue timeouts, repair, retention,
 * pruning): each is run by its own loop on its own interval, so a duty that keeps failing never
 * holds back the others (docs/failure-detection.md, "The reconciler's loops").
 */
export interface ReconcilerDuty<R> {
  /** The loop's name, in logs. */
  readonly name: string;
  /** How often its loop runs it (jittered by the loop base). */
  readonly intervalMs: number;
  /** One pass; what it changed, for the log. */
  runOnce(): Promise<R>;
  /** From what a pass found: its next pass within this many ms, sooner than the interval (undefined: the interval). */
  nextWithinMs?(r: R): number | undefined;
}

/**
 * When the reconciler may judge again (docs/failure-detection.md, "After a leader change"). After
 * a restart, and again after this replica gains the leader's lease, every heartbeat row may look
 * old for a reason that is the control plane's (its own silence, a predecessor's liveness flush
 * that lagged), so no machine or lease is judged for `lossMs` (the configured loss period).
 *
 * Bounded, because a grace holds back every duty (lost machines and attempts, queue timeouts,
 * repair, pruning): a lease that changes hands more often than `lossMs` (churn, or one overloaded
 * replica renewing late and taking a new term each time) would otherwise push the grace forward
 * for ever and nothing would be judged (found in review). So a gain during a grace extends it to at
 * most twice `lossMs` from the grace's beginning, and a new grace begins only once judging has gone
 * on for `lossMs`: whatever the lease does, a replica that leads judges at least a third of the
 * time, and a machine that dies is judged within `max(its allowance, 2 × lossMs)` plus a pass.
 */
export class JudgeGrace {
  /** The grace in force, or the last one: when it began and when it ends. */
  private began: number;
  private ends: number;

  constructor(
    private readonly lossMs: number,
    now: number,
  ) {
    this.began = now;
    this.ends = now + lossMs;
  }

  /** When judging may begin (a time on the control plane's clock). */
  get judgeFrom(): number {
    return this.ends;
  }

  /** The server (re)started listening at `now`: a grace from now, whatever came before. */
  restart(now: number): void {
    this.began = now;
    this.ends = now + this.lossMs;
  }

  /** This replica gained the leader's lease at `now`. */
  gained(now: number): void {
    if (now < this.ends) this.ends = Math.min(Math.max(this.ends, now + this.lossMs), this.began + 2 * this.lossMs);
    else if (now >= this.ends + this.lossMs) this.restart(now);
    // Else judging began less than lossMs ago: it goes on.
  }
}

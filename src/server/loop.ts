/**
 * The small base every background loop shares: an interval with jitter, `kick()` to run soon
 * (coalesced: kicks during a pass cause exactly one more pass), `runOnce()` for tests, and a
 * `stop()` that waits for the pass in flight. A pass may return a number of milliseconds: its next
 * pass then comes no later than that after it (the lost-machines duty aims at a machine's loss,
 * docs/failure-detection.md, "Branch `massloss3`"), the interval still its latest.
 */
export class Loop {
  private timer: NodeJS.Timeout | null = null;
  private immediate: NodeJS.Immediate | null = null;
  private running: Promise<void> | null = null;
  private again = false;
  private stopped = true;
  /** What the last pass asked for: its next pass within this many ms (undefined: the interval). */
  private nextWithinMs: number | undefined;

  constructor(
    readonly name: string,
    private readonly pass: () => Promise<number | void>,
    private readonly intervalMs: number,
    private readonly onError: (err: unknown) => void,
    private readonly random: () => number = Math.random,
  ) {}

  start(): void {
    this.stopped = false;
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = null;
    this.immediate = null;
    // The pass in flight is waited for, not its outcome: a failure is the tick's to report
    // (onError). Rejecting here crashed a replica that lost its leadership while a pass ran
    // (NotLeaderError, the loops stopped with `void loop.stop()`: an unhandled rejection), seen
    // with bench:fleet on PostgreSQL × 2 at 5,000 agents.
    await this.running?.catch(() => undefined);
  }

  /** Run a pass soon; used by bus wake-ups. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.schedule(0);
  }

  /** One pass now, for tests and for callers that need its effect before going on. */
  async runOnce(): Promise<void> {
    while (this.running) await this.running;
    this.nextWithinMs = undefined;
    this.running = this.pass()
      .then((within) => {
        if (typeof within === 'number') this.nextWithinMs = Math.max(0, within);
      })
      .finally(() => {
        this.running = null;
      });
    await this.running;
  }

  private schedule(delayMs: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (delayMs > 0) {
      this.timer = setTimeout(() => void this.tick(), delayMs);
      return;
    }
    // "Now" means the next turn of the event loop; a zero timeout would wait a millisecond or more,
    // and every hop from a commit to a started process (relay, scheduler) would pay it.
    if (!this.immediate) {
      this.immediate = setImmediate(() => {
        this.immediate = null;
        void this.tick();
      });
    }
  }

  private async tick(): Promise<void> {
    this.timer = null;
    if (this.stopped) return;
    this.again = false;
    try {
      await this.runOnce();
    } catch (err) {
      this.onError(err);
    }
    if (this.stopped || this.timer || this.immediate) return;
    // Jitter keeps replicas' (and loops') passes from lining up.
    const interval = this.intervalMs * (0.8 + 0.4 * this.random());
    this.schedule(this.again ? 0 : Math.min(interval, this.nextWithinMs ?? interval));
  }
}

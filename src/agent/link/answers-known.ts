/**
 * What a heartbeat's list knows of: the server's time up to which every answer this agent was
 * given has been acted on (docs/failure-detection.md, "What a heartbeat's list knows").
 *
 * A report's answer can carry attempts the server wrote `running` in its transaction (started at
 * placement), with starts no later than the answer's `asOf`. The server loses a running attempt
 * that a heartbeat leaves out; it must not when the list was made before the agent read the
 * answer that carries it. So a heartbeat says `knownAsOf`: the newest `asOf` of the answers acted
 * on (their assignments handed to runners, listed from then on), but no later than what was known
 * when each request still unanswered left: that request's answer may carry an attempt started
 * after everything known then, and a faster answer to a later request must not vouch for it.
 */
export class AnswersKnown {
  /** The newest `asOf` acted on; null before the first. */
  private newest: number | null = null;
  /** Each request in flight: `newest` when it left. */
  private readonly open = new Map<number, number | null>();
  private next = 0;

  /** A request leaves; `settled` with what this returns once its answer has been acted on, or it failed. */
  sent(): number {
    const id = this.next++;
    this.open.set(id, this.newest);
    return id;
  }

  /**
   * The request's answer has been acted on: its assignments are with their runners. `asOf` is the
   * answer's (absent: the request failed, or a server from before gave none). A request that failed
   * may have placed work whose answer never came: that work is for the server to find missing.
   */
  settled(id: number, asOf?: number): void {
    this.open.delete(id);
    if (asOf !== undefined && (this.newest === null || asOf > this.newest)) this.newest = asOf;
  }

  /**
   * For a list made now: null when nothing was ever answered nor is in flight (a fresh agent: the
   * server's arrival rule then, which is exact with no answer under way); 0 while a request that
   * left before any answer is in flight (nothing is known yet).
   */
  get knownAsOf(): number | null {
    let known = this.newest;
    for (const atSend of this.open.values()) {
      if (atSend === null) return 0;
      if (known === null || atSend < known) known = atSend;
    }
    return known;
  }
}

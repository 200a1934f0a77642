import type { Clock } from '../domain/clock.js';
import type { Store } from '../store/store.js';
import { Loop } from './loop.js';

export interface LeaderTerm {
  holder: string;
  term: number;
}

/**
 * A claim that came late: `gapMs` from the previous claim's answer to this one's call (the loop's
 * interval, TTL / 3 with jitter, plus whatever held this process's event loop), `waitedMs` for a
 * connection before its first statement, `statementMs` the rest. Together past TTL / 3 beyond the
 * interval, and the lease was that much nearer its end (docs/replicas.md, "The leader lease").
 */
export interface SlowClaim {
  gapMs: number;
  waitedMs: number | null;
  statementMs: number;
  leader: boolean;
  term: number;
}

/**
 * One replica at a time runs the scheduler and the reconciler (docs/replicas.md). Each replica
 * claims the lease row every `ttlMs / 3`; the holder renews it, the others take it over once it
 * has expired. A replica counts itself leader only while its lease is unexpired by the shared
 * clock (a renewal that fails, with the database away, ends its leadership when the lease would
 * have), and every leader-only write checks the term in its own transaction besides
 * (Store.asLeader), so two replicas never both act on one term.
 */
export class LeaderElection {
  private lease: { term: number; expiresAt: number } | null = null;
  private readonly loop: Loop;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    readonly holder: string,
    private readonly ttlMs: number,
    private readonly on: { gained(term: LeaderTerm): void; lost(why: string): void; slow?(claim: SlowClaim): void },
    onError: (err: unknown) => void,
    random: () => number = Math.random,
  ) {
    this.loop = new Loop(
      'leader',
      () => this.claim(),
      Math.max(50, Math.floor(ttlMs / 3)),
      (err) => {
        onError(err);
        this.expireIfDue();
      },
      random,
    );
  }

  /** The term this replica leads now, or null. */
  current(): LeaderTerm | null {
    if (this.lease && this.clock.now() < this.lease.expiresAt) return { holder: this.holder, term: this.lease.term };
    return null;
  }

  /** When the previous claim answered (performance.now()), for SlowClaim's gap. */
  private answeredAt: number | null = null;

  /** One claim: what the loop runs; exposed for tests. */
  async claim(): Promise<void> {
    const called = performance.now();
    const r = await this.store.leaderClaim({ holder: this.holder, now: this.clock.now(), ttlMs: this.ttlMs });
    const answered = performance.now();
    // Measured on this process's own monotonic clock, not the shared one: what is timed is where
    // this replica's claim spent its time, whatever the database's clock says.
    const gapMs = this.answeredAt === null ? 0 : called - this.answeredAt;
    this.answeredAt = answered;
    const third = this.ttlMs / 3;
    if (this.on.slow && (this.lease || r.leader) && gapMs + (answered - called) > 2 * third) {
      const waitedMs = r.waitedMs ?? null;
      this.on.slow({ gapMs, waitedMs, statementMs: answered - called - (waitedMs ?? 0), leader: r.leader, term: r.term });
    }
    if (r.leader) {
      const gained = !this.lease || this.lease.term !== r.term;
      if (gained && this.lease) this.on.lost(`term ${this.lease.term} ended`);
      this.lease = { term: r.term, expiresAt: r.expiresAt };
      if (gained) this.on.gained({ holder: this.holder, term: r.term });
    } else if (this.lease) {
      this.lease = null;
      this.on.lost(`${r.holder} leads term ${r.term}`);
    }
  }

  private expireIfDue(): void {
    if (this.lease && this.clock.now() >= this.lease.expiresAt) {
      this.lease = null;
      this.on.lost('the lease could not be renewed before it expired');
    }
  }

  start(): void {
    this.loop.start();
  }

  /** Stops claiming and, if leading, resigns, so another replica takes over at its next claim. */
  async stop(): Promise<void> {
    await this.loop.stop();
    const lease = this.lease;
    this.lease = null;
    if (lease) await this.store.leaderResign({ holder: this.holder, term: lease.term }).catch(() => {});
  }
}

/**
 * The `owed` phase of an attempt run (attempt-run.ts): its process is over and its exit recorded;
 * what remains is to get the rest of its log, its outputs and its outcome to the server, in that
 * order, retrying across outages (each call is one try; the agent calls again after the next
 * heartbeat that gets through), and to settle the run once nothing more is owed.
 */
import { isRetryable, StaleAttempt, type AgentClient } from './agent-client.js';
import type { ReportedRecord } from './agent-state.js';
import { describe, describeExit, dropOf, message, type Run } from './attempt-run.js';
import { deliverOutcome } from './deliver-outcome.js';
import { dropReason, type DropReason } from './drop-reason.js';
import type { Reporter } from './reporter.js';

export interface OutcomeDeliveryDeps {
  client: AgentClient;
  reporter: Reporter;
  now: () => number;
  log: (line: string) => void;
  /** The agent has halted: what was not delivered stays on disk for the next start. */
  halted: () => boolean;
  /** The server no longer wants it (Agent.drop). */
  drop: (run: Run, why: DropReason) => void;
  /** Nothing more is owed (Agent.forget): settled, recorded, pruned. */
  settle: (run: Run, rec: Omit<ReportedRecord, 'at'>) => Promise<void>;
  /** The server speaks protocol 2 or later: outcomes carry their typed end (attempt-end.ts). */
  typedEnds: () => boolean;
  /** Past this, an outcome that keeps failing is given up (the server takes the attempt as lost). */
  giveUpMs: number;
}

export class OutcomeDelivery {
  constructor(private readonly d: OutcomeDeliveryDeps) {}

  /** Log, outputs (only after a clean exit), then the outcome; one delivery per run at a time. Leaves the run owed when the server is unreachable. */
  deliver(run: Run): Promise<void> {
    run.delivering ??= this.deliverOnce(run).finally(() => (run.delivering = null));
    return run.delivering;
  }

  private async deliverOnce(run: Run): Promise<void> {
    const d = this.d;
    // Dropped before its delivery began: drop() settled it.
    if (run.dropped) return;
    // The outcome goes only once the server has the whole log: a stage that ended during an
    // outage keeps its last lines, and `succeeded` never shows a log still missing its end.
    const logProblem = await this.shipLog(run);
    const dropped = dropOf(run);
    if (dropped) return d.settle(run, { result: 'dropped', note: dropped.detail });
    if (logProblem === 'later') return this.owedTooLong(run);
    run.outcomeQueued = true;
    const out = await deliverOutcome(d.client, d.reporter, run.a, run.exit!, run.paths!.output, run.uploaded, run.withdraw.signal, run.logBytes, d.typedEnds());
    // A kill or a stop that came while it was under way wins over a retry.
    const late = dropOf(run);
    if (!out.settled && (late || d.halted())) {
      if (late) await d.settle(run, { result: 'dropped', note: late.detail });
      return;
    }
    d.log(`attempt ${describe(run.a)} ${describeExit(run.exit!)}; ${out.line}`);
    if (out.settled) return d.settle(run, out.record);
    return this.owedTooLong(run);
  }

  /**
   * Ships what is left of a finished attempt's log. 'later': the server cannot be reached now (the
   * outcome waits with it); null: shipped, or refused for good (said in the agent's log: the
   * outcome still goes, and the machine's files keep the whole log).
   */
  private async shipLog(run: Run): Promise<'later' | null> {
    const tail = run.tail;
    if (!tail || run.logShipped) return null;
    try {
      await tail.drain();
      run.logShipped = true;
      return null;
    } catch (err) {
      if (err instanceof StaleAttempt) {
        this.d.drop(run, dropReason('stale', 'stale: ' + err.message));
        return null;
      }
      if (isRetryable(err) || (err as { name?: unknown } | null)?.name === 'AbortError') {
        if (!run.dropped && !this.d.halted()) this.d.log(`attempt ${describe(run.a)}: log not shipped yet (${message(err)}); the outcome waits for it`);
        return 'later';
      }
      this.d.log(`attempt ${describe(run.a)}: ${tail.unshipped()} bytes of its log were refused by the server (${message(err)}); they stay in ${run.paths?.dir}`);
      run.logShipped = true;
      // The outcome carries the files' sizes: the server's log then says what it lacks.
      run.logBytes = tail.sizes();
      return null;
    }
  }

  private async owedTooLong(run: Run): Promise<void> {
    if (this.d.halted()) return;
    // Owed outcomes keep the attempt listed in heartbeats (its lease renewed), so a delivery that
    // can never succeed would hold its stage forever. Past the limit it is given up: no longer
    // listed, the server marks the attempt lost and runs the stage again. The reporter applies the
    // same limit to the outcome itself; this one covers its uploads.
    run.firstDeliveryFailure ??= this.d.now();
    const owedFor = this.d.now() - run.firstDeliveryFailure;
    if (owedFor > this.d.giveUpMs) {
      this.d.log(`attempt ${describe(run.a)}: giving up delivering its outcome after ${Math.round(owedFor / 1000)} s; the server will take it as lost`);
      await this.d.settle(run, { result: 'dropped', note: `outcome undeliverable for ${Math.round(owedFor / 1000)} s` });
    }
  }
}

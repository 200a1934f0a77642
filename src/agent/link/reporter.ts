/**
 * Everything the agent tells the server about its attempts' lives, batched: acknowledgements
 * (before a spawn), pid records (after it) and outcomes go out as items of `report` requests
 * (src/api/contract/agent-protocol.ts), at most `maxInFlight` requests in flight (default one).
 * An item queued while they are goes into the next, so under load one request (and one server
 * transaction) carries many attempts' news, and when idle an item leaves at once. With more than
 * one in flight, an attempt's items still reach the server in the order they were queued: an item
 * waits while an earlier one of its attempt is in flight (an outcome never overtakes its
 * acknowledgement), and while requests fail, one goes at a time. The one wait: while the agent says
 * more items are about to come (`coming`: acknowledgements being prepared, processes just ended),
 * a report waits for them, at most `gatherMs` after it could have gone (`gathered`).
 *
 * Each item gets a promise of its own answer. A request that fails in a way a retry can fix
 * (network, timeout, 5xx, 429) leaves its items queued, first in line, and is sent again after a
 * backoff; an item that has been failing for `giveUpMs` is rejected with Undeliverable. A 404 means
 * the server forgot the machine: `onUnknownMachine` registers again, then the items are resent.
 * Any other refusal of a whole request (a 400, a 413) is not the fault of every item in it: its
 * items are then sent one per request, so only the one at fault is rejected. Assignments an answer
 * carries (the agent asked for them, see `send`) go to `onAssignments`, before the answers to the
 * outcomes the same request carried are given (see `answer`).
 */
import type { CompletedItem, ReportItemResult, ReportRequest, ReportResponse, StartedItem } from '../../api/contract/agent-protocol.js';
import { isRetryable, UnknownMachine } from './agent-client.js';
import { errorText } from '../../lib/error-text.js';
import { backoffDelay, EQUAL_JITTER } from '../../lib/backoff-delay.js';
import { sleep } from '../../lib/sleep.js';

export interface ReporterOptions {
  /** One request; AgentClient.report. */
  send: (req: ReportRequest, signal: AbortSignal) => Promise<ReportResponse>;
  /** Called on a 404: registers again; true when it did, and the items are resent at once. */
  onUnknownMachine: () => Promise<boolean>;
  /** Ends the reporter: the request in flight and the backoff are cut short, every item is rejected. */
  signal: AbortSignal;
  now: () => number;
  /** Backoff between failed requests: baseMs, doubling, at most maxMs. */
  retry: { baseMs: number; maxMs: number };
  giveUpMs: number;
  /** Told of each failed request that will be retried, with the number of failures in a row. */
  onRetry?: (err: unknown, failures: number) => void;
  /** The server's body limit is 1 MiB by default; a single larger item is still sent, alone. */
  maxRequestBytes?: number;
  /** How long a pid record may wait for a report that goes anyway (default 1000 ms; see recordPid). */
  pidDelayMs?: number;
  /**
   * How many items the agent is about to hand over: acknowledgements of attempts whose directory is
   * being made, outcomes of processes that just ended. While some are coming, a report waits for
   * them, at most `gatherMs` after its oldest item was queued (see `gathered`).
   */
  coming?: () => number;
  /** The longest a report waits for the items `coming` counts (default 10 ms). */
  gatherMs?: number;
  /**
   * Given the assignments an answer carried (ReportResponse.assignments): after its acknowledgements
   * are answered, before its outcomes are (a turn of the event loop later; see `answer`).
   */
  onAssignments?: (assignments: NonNullable<ReportResponse['assignments']>) => void;
  /**
   * Requests in flight at once (default 1): a second hides the round trip of the first where each
   * report is a transaction of many statements away (PostgreSQL; docs/agent.md, "Reports").
   */
  maxInFlight?: number;
}

/** An item failed for longer than the reporter's `giveUpMs`; it was not delivered. */
export class Undeliverable extends Error {
  constructor(
    readonly attemptId: string,
    readonly failingForMs: number,
    readonly lastError: unknown,
  ) {
    super(`report for ${attemptId} undeliverable for ${Math.round(failingForMs / 1000)} s: ${errorText(lastError)}`);
    this.name = 'Undeliverable';
  }
}

/** ReportRequest's limit per list. */
const MAX_ITEMS = 10_000;

type Kind = 'started' | 'completed';

interface Item {
  kind: Kind;
  body: StartedItem | CompletedItem;
  bytes: number;
  /** Send in a request of its own: a request holding it was refused as a whole. */
  alone: boolean;
  /** Not sent before then (a pid: a short stage's outcome makes it moot). */
  notBefore: number;
  /** When it was queued: a report waits for items still coming at most `gatherMs` after its oldest. */
  queuedAt: number;
  sending: boolean;
  /** Withdrawn by its signal while in flight: settled by the answer, or rejected instead of requeued. */
  withdrawn: boolean;
  firstFailure: number | null;
  resolve: (r: ReportItemResult | null) => void;
  reject: (err: unknown) => void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | null;
}

export class Reporter {
  private readonly opts: ReporterOptions;
  private readonly maxBytes: number;
  private queue: Item[] = [];
  private readonly maxInFlight: number;
  /** Requests sent and not yet answered. */
  private inFlight = 0;
  /** Failed requests in a row: while any, one request at a time, sent without gathering. */
  private failures = 0;
  /** Waiting out the backoff after a failure: nothing is sent meanwhile. */
  private backingOff = false;

  constructor(opts: ReporterOptions) {
    this.opts = opts;
    this.maxBytes = opts.maxRequestBytes ?? 512 * 1024;
    this.maxInFlight = Math.max(1, Math.floor(opts.maxInFlight ?? 1));
  }

  /** Queued items, sent or not: for tests and logs. */
  get pending(): number {
    return this.queue.length;
  }

  /**
   * The acknowledgement, before spawning: nothing may run unless it is answered `ok` (or
   * `duplicate`: an earlier copy of it was recorded). `signal` withdraws it.
   */
  acknowledge(attemptId: string, token: number, signal?: AbortSignal): Promise<ReportItemResult> {
    return this.add('started', { attemptId, token, pid: null }, signal) as Promise<ReportItemResult>;
  }

  /**
   * The pid, after the spawn. Null when it was never sent because the attempt's outcome went in its
   * place. Only informative for the server (the agent kills by its own records), so it waits
   * `pidDelayMs` before it goes, with whatever report goes then (or alone): a stage shorter than
   * that never sends it, its outcome replaces it. Under load that is most stages, and each pid sent
   * costs the server a write (measured: 2,700 of them for 3,000 short stages when pids rode with the
   * next report of any attempt).
   */
  recordPid(attemptId: string, token: number, pid: number, signal?: AbortSignal): Promise<ReportItemResult | null> {
    return this.add('started', { attemptId, token, pid }, signal, this.opts.now() + (this.opts.pidDelayMs ?? 1000));
  }

  /** The outcome. A pid record of the same attempt still waiting is dropped: it would say nothing the outcome does not. */
  complete(item: CompletedItem, signal?: AbortSignal): Promise<ReportItemResult> {
    for (const q of this.queue) {
      if (q.kind === 'started' && !q.sending && q.body.attemptId === item.attemptId && (q.body as StartedItem).pid !== null) {
        this.remove(q);
        q.resolve(null);
      }
    }
    return this.add('completed', item, signal) as Promise<ReportItemResult>;
  }

  private add(kind: Kind, body: StartedItem | CompletedItem, signal: AbortSignal | undefined, notBefore = 0): Promise<ReportItemResult | null> {
    return new Promise((resolve, reject) => {
      if (this.opts.signal.aborted) return reject(abortError(this.opts.signal));
      if (signal?.aborted) return reject(abortError(signal));
      const item: Item = {
        kind,
        body,
        bytes: Buffer.byteLength(JSON.stringify(body)) + 1,
        alone: false,
        notBefore,
        queuedAt: this.opts.now(),
        sending: false,
        withdrawn: false,
        firstFailure: null,
        resolve: (r) => (this.unlisten(item), resolve(r)),
        reject: (e) => (this.unlisten(item), reject(e)),
        signal,
        onAbort: null,
      };
      if (signal) {
        item.onAbort = () => {
          if (item.sending) item.withdrawn = true;
          else {
            this.remove(item);
            item.reject(signal.reason);
          }
        };
        signal.addEventListener('abort', item.onAbort, { once: true });
      }
      this.queue.push(item);
      this.pump();
    });
  }

  private unlisten(item: Item): void {
    if (item.onAbort) item.signal?.removeEventListener('abort', item.onAbort);
    item.onAbort = null;
  }

  private remove(item: Item): void {
    const i = this.queue.indexOf(item);
    if (i >= 0) this.queue.splice(i, 1);
  }

  /** One pass over the queue, however many items: a batch can hold thousands. */
  private removeAll(items: Item[]): void {
    const gone = new Set(items);
    this.queue = this.queue.filter((it) => !gone.has(it));
  }

  /** Whether anything queued is due now; otherwise a timer pumps when the first one is. */
  private due(): boolean {
    const now = this.opts.now();
    let first = Infinity;
    for (const it of this.queue) {
      if (it.notBefore <= now) return true;
      first = Math.min(first, it.notBefore);
    }
    if (first < Infinity && !this.wake) this.wake = this.pumpIn(first - now, () => (this.wake = null));
    return false;
  }

  /** A timer that pumps in `ms` (and lets the process exit meanwhile); `done` clears its handle first. */
  private pumpIn(ms: number, done: () => void): NodeJS.Timeout {
    const t = setTimeout(() => {
      done();
      this.pump();
    }, ms);
    t.unref?.();
    return t;
  }

  private wake: NodeJS.Timeout | null = null;

  /**
   * Whether the next report may go: yes unless the agent is about to hand over more items and the
   * oldest due one has waited less than `gatherMs`; then a timer pumps when it has (an item added
   * meanwhile pumps too). A busy agent's acknowledgements come one after another as their
   * directories are made, and its outcomes as its processes end: sent as they come, the first of
   * each group went alone and the rest after its answer, two requests and two server transactions
   * where one does (measured on the throughput bench: 800 reports for 3,000 stages, every other
   * one carrying a single item).
   */
  private gathered(): boolean {
    const coming = this.opts.coming?.() ?? 0;
    if (coming === 0) return true;
    const now = this.opts.now();
    // Counted from when the report could have gone: an item queued while the last one was in
    // flight has waited for that answer already, and the acknowledgements coming now are often of
    // the assignments that answer carried.
    let oldest = Infinity;
    for (const it of this.queue) if (!it.sending && it.notBefore <= now) oldest = Math.min(oldest, it.queuedAt);
    const until = Math.max(oldest, this.answeredAt) + (this.opts.gatherMs ?? 10);
    if (now >= until) return true;
    if (!this.gather) this.gather = this.pumpIn(until - now, () => (this.gather = null));
    return false;
  }

  private gather: NodeJS.Timeout | null = null;
  /** When the last request's answer (or failure) came. */
  private answeredAt = -Infinity;

  /**
   * Sends what may go now, up to `maxInFlight` requests; called whenever that may have changed (an
   * item queued, an answer, a timer, the end of a backoff). Never waits itself.
   */
  private pump(): void {
    const halt = this.opts.signal;
    if (halt.aborted) {
      // Everything still queued is rejected once nothing is in flight (an answer in flight settles its own).
      if (this.inFlight === 0) for (const it of this.queue.splice(0)) it.reject(halt.reason);
      return;
    }
    while (this.inFlight < (this.failures > 0 ? 1 : this.maxInFlight) && !this.backingOff && this.queue.length > 0) {
      if (this.failures === 0 && !(this.due() && this.gathered())) break;
      const batch = this.take();
      if (batch.length === 0) {
        // Only items not due yet, or held behind their attempt's items in flight: a timer or an answer pumps again.
        this.due();
        break;
      }
      for (const it of batch) it.sending = true;
      this.inFlight++;
      void this.send(batch).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  /** One request, and what its answer or failure means for its items. */
  private async send(batch: Item[]): Promise<void> {
    const halt = this.opts.signal;
    try {
      const res = await this.opts.send(toRequest(batch), halt);
      this.answeredAt = this.opts.now();
      const outcomes = this.answer(batch, res);
      this.failures = 0;
      // The outcomes' answers after what the new assignments' starts do before they wait on
      // anything (answer() says why); queued first, so that a throw below cannot keep them.
      if (outcomes) setImmediate(outcomes);
      if (res?.assignments?.length) this.opts.onAssignments?.(res.assignments);
    } catch (err) {
      this.answeredAt = this.opts.now();
      for (const it of batch) it.sending = false;
      if (halt.aborted) return;
      if (err instanceof UnknownMachine || isRetryable(err)) {
        this.failures++;
        const failures = this.failures;
        this.requeue(batch, err);
        // Registered again: resend at once, but only the first time in a row (a server without
        // this route answers 404 for ever, and must not be asked in a tight loop).
        if (err instanceof UnknownMachine && (await this.opts.onUnknownMachine().catch(() => false)) && failures === 1) return;
        this.opts.onRetry?.(err, failures);
        this.backingOff = true;
        try {
          await sleep(backoffDelay({ ...this.opts.retry, jitter: EQUAL_JITTER }, failures, Math.random()), halt);
        } catch {
          // Halted during the wait: pump() rejects what is queued.
        } finally {
          this.backingOff = false;
        }
      } else if (batch.length > 1) {
        for (const it of batch) it.alone = true;
        this.requeue(batch, null);
      } else {
        this.removeAll(batch);
        batch[0]!.reject(err);
      }
    }
  }

  /** The items of the next request, in queue order, each list within its limit and the whole within maxBytes. */
  private take(): Item[] {
    // An attempt with an item in flight, or one left behind in this pass: its later items wait, so
    // that the server hears each attempt's news in the order they were queued.
    const held = new Set<string>();
    for (const it of this.queue) if (it.sending) held.add(it.body.attemptId);
    const first = this.queue.find((it) => it.alone && !it.sending && !held.has(it.body.attemptId));
    if (first) return [first];
    const now = this.opts.now();
    const batch: Item[] = [];
    const count = { started: 0, completed: 0 };
    let bytes = 0;
    for (const it of this.queue) {
      if (it.sending) continue;
      if (held.has(it.body.attemptId) || it.alone) {
        held.add(it.body.attemptId);
        continue;
      }
      if (it.notBefore > now) continue;
      if (count[it.kind] >= MAX_ITEMS) {
        held.add(it.body.attemptId);
        continue;
      }
      if (batch.length > 0 && bytes + it.bytes > this.maxBytes) break;
      batch.push(it);
      count[it.kind]++;
      bytes += it.bytes;
    }
    return batch;
  }

  /**
   * Answers come in the request's order, one per item (ReportResponse); anything else is the
   * server's error. The acknowledgements' answers are given now (an acknowledged attempt spawns
   * on its answer); the outcomes' are returned, for the caller to give once the assignments the
   * same answer carried have started (`onAssignments`, then a turn of the event loop): what an
   * outcome's answer sets off is its attempt's settling (journal, directory emptied and renamed
   * aside, logs removed, its uid released: AttemptRunner.settle), 0.1–0.2 ms of the agent's
   * file system calls an attempt, and an answer that ends ten attempts and starts ten put most of
   * it before the new attempts' spawns (docs/agent.md, "An answer's assignments before its
   * outcomes"). Null when there is nothing left to give.
   */
  private answer(batch: Item[], res: ReportResponse): (() => void) | null {
    this.removeAll(batch);
    const started = batch.filter((it) => it.kind === 'started');
    const completed = batch.filter((it) => it.kind === 'completed');
    const matches = (items: Item[], answers: unknown) =>
      Array.isArray(answers) &&
      answers.length === items.length &&
      items.every((it, i) => (answers[i] as ReportItemResult | undefined)?.attemptId === it.body.attemptId);
    if (!matches(started, res?.started) || !matches(completed, res?.completed)) {
      const err = new Error(`the server's answer to a report of ${started.length} + ${completed.length} item(s) does not match it`);
      for (const it of batch) it.reject(err);
      return null;
    }
    started.forEach((it, i) => it.resolve(res.started[i]!));
    if (completed.length === 0) return null;
    return () => completed.forEach((it, i) => it.resolve(res.completed[i]!));
  }

  /** Failed items stay first in line, unless withdrawn meanwhile or failing for too long. */
  private requeue(batch: Item[], err: unknown): void {
    const now = this.opts.now();
    const out: [Item, unknown][] = [];
    for (const it of batch) {
      if (it.withdrawn) out.push([it, it.signal?.reason]);
      else if (err !== null && now - (it.firstFailure ??= now) > this.opts.giveUpMs)
        out.push([it, new Undeliverable(it.body.attemptId, now - it.firstFailure, err)]);
    }
    if (out.length === 0) return;
    this.removeAll(out.map(([it]) => it));
    for (const [it, e] of out) it.reject(e);
  }
}

function toRequest(batch: Item[]): ReportRequest {
  const req: ReportRequest = { started: [], completed: [] };
  for (const it of batch) {
    if (it.kind === 'started') req.started.push(it.body as StartedItem);
    else req.completed.push(it.body as CompletedItem);
  }
  return req;
}

/** What an aborted signal rejects with: its reason, which AbortController makes an Error (an AbortError) unless given another. */
function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new Error(String(reason));
}

import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { parseJobBatchText, parseJobSpecText } from '../spec/job-spec-text.js';
import { BATCH_BOUNDS, SPEC_BOUNDS } from '../spec/spec-limits.js';
import { checkSpecText } from '../spec/spec-text.js';
import { ValidationError, type ValidationIssue } from '../spec/validation-error.js';

/** What is read: one job spec (SPEC_BOUNDS) or a batch (BATCH_BOUNDS). */
type SpecTextKind = 'spec' | 'batch';
export interface SpecTextRequest {
  id: number;
  kind: SpecTextKind;
  text: string;
}
export type SpecTextReply = { id: number; value: unknown } | { id: number; issues: ValidationIssue[] } | { id: number; error: string };

/**
 * Texts up to this many characters are read on the event loop: a spec of a few kilobytes costs the
 * parser about a millisecond, less than the trip to the thread. Larger ones go to the thread: a
 * 1 MiB YAML spec held every other request for about 3 s on two busy cores, a 470 KB batch of 5,000
 * jobs 2.7 s (docs/security.md, "Specs' shape").
 */
export const INLINE_SPEC_CHARS = 64 * 1024;
/** The thread's heap: a batch at its bounds (500,000 values) takes the parser about 500 MB. */
const THREAD_HEAP_MB = 1024;

/**
 * Threads a server reads large texts on: two, and up to four on a machine of eight cores or more.
 * One thread made every large text wait for the one before it: a 3 s megabyte of one team's YAML
 * held another's small batch just past the inline size. Each thread's heap may grow to
 * THREAD_HEAP_MB while it reads a text at the bounds, so the pool stays small.
 */
export const defaultSpecThreads = (cores = availableParallelism()): number => Math.min(4, Math.max(2, Math.floor(cores / 2)));

/** One thread of the pool and the texts it has been given and not yet answered. */
interface SpecThread {
  worker: Worker;
  pending: Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void; kind: SpecTextKind }>;
}

/**
 * Reads YAML spec and batch texts for the API, large ones on worker threads (a small pool, each
 * text to the thread with the fewest waiting), so that the event loop never waits for the parser.
 * Within the bounds a thread is not expected to fail; if one does (out of its heap), the texts it
 * held are refused (400), the other threads' are not, and the next read starts a new one.
 */
export class OffLoopSpecText {
  private readonly threads: (SpecThread | null)[];
  private nextId = 1;

  /** `heapMb`: each thread's heap (tests make it fail with a small one); `threads`: the pool's size. */
  constructor(
    private readonly heapMb = THREAD_HEAP_MB,
    threads = defaultSpecThreads(),
  ) {
    this.threads = Array.from({ length: Math.max(1, threads) }, () => null);
  }

  /** The text's plain value, or a ValidationError as parseJobSpecText / parseJobBatchText throw it. */
  async read(kind: SpecTextKind, text: string): Promise<unknown> {
    if (text.length <= INLINE_SPEC_CHARS) return kind === 'spec' ? parseJobSpecText(text) : parseJobBatchText(text);
    // The bounds first, here: a text past them is refused in milliseconds, without waiting for a
    // thread or holding it up for the texts behind it.
    checkSpecText(text, { bounds: kind === 'spec' ? SPEC_BOUNDS : BATCH_BOUNDS, what: kind });
    const t = this.leastBusy();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      t.pending.set(id, { resolve, reject, kind });
      t.worker.postMessage({ id, kind, text } satisfies SpecTextRequest);
    });
  }

  /** Threads started and not ended (a pool's threads start on their first text). */
  running(): number {
    return this.threads.filter((t) => t !== null).length;
  }

  /** Ends the threads (the API's close); texts still being read are refused. */
  async close(): Promise<void> {
    const all = this.threads.filter((t): t is SpecThread => t !== null);
    this.threads.fill(null);
    for (const t of all) failAll(t, 'the server is stopping');
    await Promise.all(all.map((t) => t.worker.terminate()));
  }

  /** An idle thread if there is one (starting one in an empty place), else the one with the fewest texts. */
  private leastBusy(): SpecThread {
    let best: SpecThread | null = null;
    for (let i = 0; i < this.threads.length; i++) {
      const t = this.threads[i];
      if (!t) return this.start(i);
      if (!best || t.pending.size < best.pending.size) best = t;
      if (best.pending.size === 0) break;
    }
    return best!;
  }

  private start(slot: number): SpecThread {
    // From the sources (tests, `tsx`), the thread loads TypeScript through tsx; built, plain JavaScript.
    const ts = import.meta.url.endsWith('.ts');
    const file = new URL(`./spec-text-thread.${ts ? 'ts' : 'js'}`, import.meta.url);
    const options = { resourceLimits: { maxOldGenerationSizeMb: this.heapMb } };
    const w = ts
      ? new Worker(`import('tsx/esm/api').then(({ register }) => { register(); return import(${JSON.stringify(file.href)}); })`, { ...options, eval: true })
      : new Worker(file, options);
    // Not a reason for the process to stay up.
    w.unref();
    const t: SpecThread = { worker: w, pending: new Map() };
    w.on('message', (reply: SpecTextReply) => {
      const p = t.pending.get(reply.id);
      if (!p) return;
      t.pending.delete(reply.id);
      if ('value' in reply) p.resolve(reply.value);
      else if ('issues' in reply) p.reject(new ValidationError(reply.issues));
      else p.reject(new ValidationError([{ path: '', message: `cannot read the ${p.kind}: ${reply.error}` }]));
    });
    const gone = (why: string) => {
      if (this.threads[slot] === t) this.threads[slot] = null;
      failAll(t, why);
    };
    w.on('error', (e) => gone(`the parser stopped: ${e.message}`));
    w.on('exit', () => gone('the parser stopped'));
    this.threads[slot] = t;
    return t;
  }
}

/** Refuses every text `t` still holds, saying why. */
function failAll(t: SpecThread, why: string): void {
  for (const [id, p] of t.pending) {
    t.pending.delete(id);
    p.reject(new ValidationError([{ path: '', message: `cannot read the ${p.kind}: ${why}` }]));
  }
}

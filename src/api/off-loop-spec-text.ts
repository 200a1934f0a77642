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
 * Reads YAML spec and batch texts for the API, large ones on a worker thread of their own, one at
 * a time, so that the event loop never waits for the parser. Within the bounds the thread is not
 * expected to fail; if it does (out of its heap), the texts it held are refused (400) and the next
 * starts a new thread.
 */
export class OffLoopSpecText {
  private worker: Worker | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void; kind: SpecTextKind }>();

  /** `heapMb`: the thread's heap (tests make it fail with a small one). */
  constructor(private readonly heapMb = THREAD_HEAP_MB) {}

  /** The text's plain value, or a ValidationError as parseJobSpecText / parseJobBatchText throw it. */
  async read(kind: SpecTextKind, text: string): Promise<unknown> {
    if (text.length <= INLINE_SPEC_CHARS) return kind === 'spec' ? parseJobSpecText(text) : parseJobBatchText(text);
    // The bounds first, here: a text past them is refused in milliseconds, without waiting for the
    // thread or holding it up for the texts behind it.
    checkSpecText(text, { bounds: kind === 'spec' ? SPEC_BOUNDS : BATCH_BOUNDS, what: kind });
    const worker = this.thread();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, kind });
      worker.postMessage({ id, kind, text } satisfies SpecTextRequest);
    });
  }

  /** Ends the thread (the API's close); texts still being read are refused. */
  async close(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    this.failAll('the server is stopping');
    if (w) await w.terminate();
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    // From the sources (tests, `tsx`), the thread loads TypeScript through tsx; built, plain JavaScript.
    const ts = import.meta.url.endsWith('.ts');
    const file = new URL(`./spec-text-thread.${ts ? 'ts' : 'js'}`, import.meta.url);
    const options = { resourceLimits: { maxOldGenerationSizeMb: this.heapMb } };
    const w = ts
      ? new Worker(`import('tsx/esm/api').then(({ register }) => { register(); return import(${JSON.stringify(file.href)}); })`, { ...options, eval: true })
      : new Worker(file, options);
    // Not a reason for the process to stay up.
    w.unref();
    w.on('message', (reply: SpecTextReply) => {
      const p = this.pending.get(reply.id);
      if (!p) return;
      this.pending.delete(reply.id);
      if ('value' in reply) p.resolve(reply.value);
      else if ('issues' in reply) p.reject(new ValidationError(reply.issues));
      else p.reject(new ValidationError([{ path: '', message: `cannot read the ${p.kind}: ${reply.error}` }]));
    });
    const gone = (why: string) => {
      if (this.worker === w) this.worker = null;
      this.failAll(why);
    };
    w.on('error', (e) => gone(`the parser stopped: ${e.message}`));
    w.on('exit', () => gone('the parser stopped'));
    this.worker = w;
    return w;
  }

  private failAll(why: string): void {
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      p.reject(new ValidationError([{ path: '', message: `cannot read the ${p.kind}: ${why}` }]));
    }
  }
}

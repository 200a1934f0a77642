/**
 * The workload every bench/peers/*-chains.ts runs, in one place so the peers cannot drift apart:
 * N chains A → B → C, each stage spawning `true` and succeeding on exit 0, 10 handlers per stage
 * (Gantry's agent in bench/throughput.ts has 30 slots; `--slots S` there gives S / 3), all chains submitted first (8 at a time,
 * as the Gantry side submits), then waited for. The result is one JSON line on stdout.
 */
import { spawn } from 'node:child_process';

/** bench/throughput.ts sets GANTRY_BENCH_HANDLERS_PER_STAGE to a third of its agent's slots (`--slots`). */
export const HANDLERS_PER_STAGE = Number(process.env.GANTRY_BENCH_HANDLERS_PER_STAGE ?? '10');
export const SUBMIT_CONCURRENCY = 8;

export interface ChainsResult {
  peer: string;
  chains: number;
  submitMs: number;
  wallMs: number;
  chainsPerSec: number;
  bWaitP50Ms: number;
  bWaitP99Ms: number;
  cpuMs: { client: number; server: number };
  /** The whole machine's CPU over the run (proc-cpu.ts machineCpuMs): everything the run caused. */
  machineCpuMs?: number | null;
}

export function chainsArg(): number {
  const i = process.argv.indexOf('--chains');
  const n = i > 0 ? Number(process.argv[i + 1]) : 1000;
  if (!Number.isInteger(n) || n < 1) throw new Error(`--chains wants a positive integer, got ${process.argv[i + 1]}`);
  return n;
}

/** One stage's work: `true` in its own process group, as Gantry's agent starts a stage. */
export function runStage(): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('true', [], { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.resume();
    child.stderr.resume();
    child.on('error', reject);
    child.on('close', (code, signal) => (code === 0 ? resolve() : reject(new Error(`true exited ${code ?? signal}`))));
  });
}

/** Enqueues chains 0..n-1 with `concurrency` adds in flight. */
export async function submitAll(n: number, add: (chain: number) => Promise<unknown>, concurrency = SUBMIT_CONCURRENCY): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, n) }, async () => {
      while (next < n) await add(next++);
    }),
  );
}

/** Nearest-rank percentile (NaN for none): every bench table uses this one rule. */
export function percentile(xs: readonly number[], p: number): number {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
}

/** Per chain: when A's process ended and when B's handler started, on performance.now(). */
export class BWaits {
  private readonly aEnded: Float64Array;
  private readonly bStarted: Float64Array;
  constructor(n: number) {
    this.aEnded = new Float64Array(n).fill(NaN);
    this.bStarted = new Float64Array(n).fill(NaN);
  }
  aEnd(chain: number): void {
    this.aEnded[chain] = performance.now();
  }
  bStart(chain: number): void {
    this.bStarted[chain] = performance.now();
  }
  /** p50 and p99 of B start − A end, ms; by `percentile`. */
  percentiles(): { p50: number; p99: number } {
    const waits: number[] = [];
    for (let i = 0; i < this.aEnded.length; i++) waits.push(this.bStarted[i]! - this.aEnded[i]!);
    return { p50: percentile(waits, 50), p99: percentile(waits, 99) };
  }
}

/** Resolves when `count` reaches `n`; rejects on `fail` or after `ms`. */
export class Finish {
  done = 0;
  readonly promise: Promise<void>;
  private resolve!: () => void;
  private reject!: (e: Error) => void;
  private readonly timer: NodeJS.Timeout;
  constructor(
    private readonly n: number,
    ms: number,
  ) {
    this.promise = new Promise<void>((res, rej) => ((this.resolve = res), (this.reject = rej)));
    this.promise.catch(() => {}); // a failure before anyone awaits is not an unhandled rejection
    this.timer = setTimeout(() => this.fail(new Error(`timed out after ${ms / 1000} s with ${this.done} of ${n} chains done`)), ms);
  }
  count(): void {
    if (++this.done === this.n) {
      clearTimeout(this.timer);
      this.resolve();
    }
  }
  fail(e: Error): void {
    clearTimeout(this.timer);
    this.reject(e);
  }
  /** Ends the clock when the run stops early, so the timer does not hold the process open. */
  stop(): void {
    clearTimeout(this.timer);
  }
}

/** Bounds a run: 10 minutes unless --timeout-s says otherwise. */
export function timeoutMs(): number {
  const i = process.argv.indexOf('--timeout-s');
  return (i > 0 ? Number(process.argv[i + 1]) : 600) * 1000;
}

/** Prints the one stdout line; an error line makes the exit code 1. */
export function report(line: ChainsResult | { peer: string; chains: number; skipped: string } | { peer: string; chains: number; error: string }): void {
  process.stdout.write(JSON.stringify(line) + '\n');
  if ('error' in line) process.exitCode = 1;
}

/**
 * Called once everything is closed: the process should then exit by itself. If a library left a
 * handle open, it is ended 30 s later rather than kept alive.
 */
export function exitIfStuck(ms = 30_000): void {
  setTimeout(() => {
    process.stderr.write(`still running ${ms / 1000} s after the end: handles left open, exiting\n`);
    process.exit(process.exitCode ?? 1);
  }, ms).unref();
}

/** Library logs go to stderr: stdout carries only the result line. */
export function consoleToStderr(): void {
  console.log = console.error;
  console.info = console.error;
  console.debug = console.error;
}

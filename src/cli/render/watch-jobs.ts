import { createLogUpdate } from 'log-update';
import { ConnectionError } from '../client/connection-error.js';
import type { GantryClient } from '../client/gantry-client.js';
import { pollDelay } from '../client/poll-delay.js';
import { JOB_STATES, isTerminalJobState } from '../../api/contract/states.js';
import { canRedraw, type CliIo } from './cli-io.js';
import { formatDuration } from './format-duration.js';
import { palette } from './palette.js';
import { colorState } from './state-color.js';
import { clock } from './watch-job.js';

export interface JobOutcome {
  id: string;
  name: string;
  /** The last state seen ("unknown" until the first answer). */
  state: string;
  failureReason: string | null;
}

export interface WatchJobsOptions {
  /** One `{"total":N,"states":{…}}` line per change (NDJSON), instead of human output. */
  json?: boolean;
  /** Pause between rounds in ms (default 500). */
  interval?: number;
  /** Print nothing while waiting; the caller reports the outcome (`submit --wait`). */
  quiet?: boolean;
  /** How long to keep retrying while the server is unreachable (default 60 s). */
  reconnectGraceMs?: number;
  /** Requests in flight at once (default 8). */
  concurrency?: number;
}

// Job states in lifecycle order (the wire's list), for the progress line; a state a newer server
// sends that this list lacks is shown after these.
const ORDER: readonly string[] = ['unknown', ...JOB_STATES];

/** How many jobs are in each state, in lifecycle order. */
export function stateCounts(jobs: readonly JobOutcome[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const j of jobs) counts.set(j.state, (counts.get(j.state) ?? 0) + 1);
  const rank = (s: string) => (ORDER.includes(s) ? ORDER.indexOf(s) : ORDER.length);
  return [...counts].sort(([a], [b]) => rank(a) - rank(b) || a.localeCompare(b));
}

/**
 * Follows many jobs until every one has ended or `io.signal` aborts. Each round asks for the jobs
 * not yet ended (a few requests at a time), then shows the counts by state: redrawn in place on a
 * TTY, a plain line whenever they change elsewhere.
 */
export async function watchJobs(
  client: Pick<GantryClient, 'getJob'>,
  refs: readonly { id: string; name: string }[],
  opts: WatchJobsOptions & { io: CliIo },
): Promise<{ jobs: JobOutcome[]; interrupted: boolean }> {
  const { io } = opts;
  const now = io.now ?? Date.now;
  const grace = opts.reconnectGraceMs ?? 60_000;
  const jobs: JobOutcome[] = refs.map((r) => ({ id: r.id, name: r.name, state: 'unknown', failureReason: null }));
  const view = opts.quiet ? null : opts.json ? jsonView(io) : canRedraw(io.stdout) ? ttyView(io, now) : lineView(io, now);
  let lastContact = now();
  let interrupted = false;
  try {
    for (;;) {
      const open = jobs.filter((j) => !isTerminalJobState(j.state));
      try {
        await inParallel(open, opts.concurrency ?? 8, io.signal, async (j) => {
          const v = await client.getJob(j.id);
          j.state = v.state;
          j.failureReason = v.failureReason;
          lastContact = now();
        });
      } catch (e) {
        if (!(e instanceof ConnectionError) || now() - lastContact > grace) throw e;
        view?.lostContact(e);
      }
      view?.show(jobs);
      if (jobs.every((j) => isTerminalJobState(j.state))) break;
      if (io.signal?.aborted || !(await pollDelay(opts.interval ?? 500, io.signal))) {
        interrupted = true;
        break;
      }
    }
  } finally {
    view?.close();
  }
  return { jobs, interrupted };
}

/** Runs `fn` over `items`, `limit` at a time; starts no more once `signal` aborts or one fails
 *  (then rethrows that failure, after the ones in flight have settled). */
async function inParallel<T>(items: readonly T[], limit: number, signal: AbortSignal | undefined, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failure: { error: unknown } | undefined;
  const worker = async () => {
    while (next < items.length && !signal?.aborted && !failure) {
      try {
        await fn(items[next++]!);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failure) throw failure.error;
}

interface View {
  show(jobs: readonly JobOutcome[]): void;
  lostContact(e: ConnectionError): void;
  close(): void;
}

function jsonView(io: CliIo): View {
  let last = '';
  return {
    show(jobs) {
      const line = JSON.stringify({ total: jobs.length, states: Object.fromEntries(stateCounts(jobs)) });
      if (line !== last) io.stdout.write(`${line}\n`);
      last = line;
    },
    lostContact() {},
    close() {},
  };
}

/** "12 jobs  3 queued  2 running  7 succeeded" */
function countsText(jobs: readonly JobOutcome[], color: (state: string) => string): string {
  return [`${jobs.length} jobs`, ...stateCounts(jobs).map(([s, n]) => `${n} ${color(s)}`)].join('  ');
}

function ttyView(io: CliIo, now: () => number): View {
  const c = palette(io.color);
  const log = createLogUpdate(io.stdout as NodeJS.WritableStream);
  const started = now();
  let warning = '';
  return {
    show(jobs) {
      const line = `${countsText(jobs, (s) => colorState(s, c))}  ${formatDuration(now() - started)} elapsed`;
      log(warning ? `${line}\n${c.yellow(warning)}` : line);
      warning = '';
    },
    lostContact(e) {
      warning = `${e.message}; retrying`;
    },
    close() {
      log.done();
    },
  };
}

function lineView(io: CliIo, now: () => number): View {
  const c = palette(io.color);
  let last = '';
  let warned = false;
  return {
    show(jobs) {
      warned = false;
      const line = countsText(jobs, (s) => s);
      if (line !== last) io.stdout.write(`${c.dim(clock(now()))} ${countsText(jobs, (s) => colorState(s, c))}\n`);
      last = line;
    },
    lostContact(e) {
      if (!warned) io.stderr.write(`${e.message}; retrying\n`);
      warned = true;
    },
    close() {},
  };
}

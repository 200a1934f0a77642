import { createLogUpdate } from 'log-update';
import { ConnectionError } from '../client/connection-error.js';
import type { GantryClient } from '../client/gantry-client.js';
import { pollDelay } from '../client/poll-delay.js';
import { jobStateOfEvent } from '../../api/contract/event-types.js';
import { JOB_STATES, isTerminalJobState } from '../../api/contract/states.js';
import { canRedraw, type CliIo } from './cli-io.js';
import { eventWakeups } from './event-wakeups.js';
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
  /** Pause between rounds in ms when polling a server without the event stream (default 500). */
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
 * Follows many jobs until every one has ended or `io.signal` aborts, showing the counts by state:
 * redrawn in place on a TTY, a plain line whenever they change elsewhere.
 *
 * On the event stream (GET /v1/events, from the batch's first event on), a job's state is what its
 * `job:<state>` events say, in order, so nothing is read but the failure reasons of the jobs that
 * end badly; a server without the stream is polled: each round reads the jobs not yet ended, a few
 * requests at a time.
 */
export async function watchJobs(
  client: Pick<GantryClient, 'getJob'> & Partial<Pick<GantryClient, 'followEvents' | 'events'>>,
  refs: readonly { id: string; name: string }[],
  opts: WatchJobsOptions & { io: CliIo },
): Promise<{ jobs: JobOutcome[]; interrupted: boolean }> {
  const { io } = opts;
  const now = io.now ?? Date.now;
  const grace = opts.reconnectGraceMs ?? 60_000;
  const jobs: JobOutcome[] = refs.map((r) => ({ id: r.id, name: r.name, state: 'unknown', failureReason: null }));
  const redraws = !opts.quiet && !opts.json && canRedraw(io.stdout);
  const view = opts.quiet ? null : opts.json ? jsonView(io) : redraws ? ttyView(io, now) : lineView(io, now);
  const live = await liveStates(client, jobs, io.signal);
  const read = async (j: JobOutcome) => {
    const v = await client.getJob(j.id);
    j.state = v.state;
    j.failureReason = v.failureReason;
    lastContact = now();
  };
  let lastContact = now();
  let interrupted = false;
  try {
    for (;;) {
      try {
        // Live: only the jobs that ended badly, for their reasons; polling: every job still open.
        const toRead = live && !live.failed() ? live.endedBadly() : jobs.filter((j) => !isTerminalJobState(j.state));
        await inParallel(toRead, opts.concurrency ?? 8, io.signal, read);
      } catch (e) {
        if (!(e instanceof ConnectionError) || now() - lastContact > grace) throw e;
        view?.lostContact(e);
      }
      // Live, the first states come with the stream's replay, a moment after it opens.
      if (!live || jobs.some((j) => j.state !== 'unknown')) view?.show(jobs);
      if (jobs.every((j) => isTerminalJobState(j.state))) break;
      // On a terminal the elapsed clock is redrawn every second; elsewhere only a change prints.
      const woke =
        live && !live.failed() ? await live.next(redraws ? 1000 : 10_000) : !io.signal?.aborted && (await pollDelay(opts.interval ?? 500, io.signal));
      if (!woke) {
        interrupted = true;
        break;
      }
    }
  } finally {
    view?.close();
    live?.stop();
  }
  return { jobs, interrupted };
}

/**
 * The jobs' states from the event stream, replayed from the batch's first event (its first job's
 * `job:submitted`: a batch is one transaction, its events in order), so no change is missed
 * whenever the stream starts. Null when the server has no stream or the first job's events cannot
 * be read: the caller polls. `endedBadly`: jobs that ended failed or canceled since the last call.
 */
async function liveStates(client: Partial<Pick<GantryClient, 'followEvents' | 'events'>>, jobs: JobOutcome[], signal?: AbortSignal) {
  if (!client.followEvents || !client.events || jobs.length === 0) return null;
  let first: number | undefined;
  try {
    first = (await client.events(jobs[0]!.id))[0]?.seq;
  } catch {
    return null;
  }
  if (first === undefined) return null;
  const byId = new Map(jobs.map((j) => [j.id, j]));
  let bad: JobOutcome[] = [];
  const wakeups = eventWakeups(
    client as Pick<GantryClient, 'followEvents'>,
    {},
    {
      ...(signal ? { signal } : {}),
      lastEventId: first - 1,
      onEvent: (e) => {
        const j = byId.get(e.jobId ?? '');
        const state = j ? jobStateOfEvent(e.type) : null;
        if (!j || !state) return false;
        j.state = state;
        if (isTerminalJobState(state) && state !== 'succeeded') bad.push(j);
        return true;
      },
    },
  );
  return {
    ...wakeups,
    endedBadly(): JobOutcome[] {
      const out = bad;
      bad = [];
      return out;
    },
  };
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

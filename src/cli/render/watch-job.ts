import { createLogUpdate } from 'log-update';
import type { JobView, StageView } from '../../api/contract/job-view.js';
import { ConnectionError } from '../client/connection-error.js';
import type { GantryClient } from '../client/gantry-client.js';
import { pollDelay } from '../client/poll-delay.js';
import { latestAttempt } from '../../api/contract/attempts-counted.js';
import { gpuText } from './attempt-text.js';
import { canRedraw, type CliIo } from './cli-io.js';
import { eventWakeups } from './event-wakeups.js';
import { formatDuration } from './format-duration.js';
import { palette, type Colors } from './palette.js';
import { progressLine } from './progress-line.js';
import { stageReason } from './stage-reason.js';
import { renderStageTable } from './stage-table.js';
import { isTerminalJobState } from '../../api/contract/states.js';

export interface WatchOptions {
  /** One JobView per line (NDJSON) whenever the job changes, instead of human output. */
  json?: boolean;
  /** Poll interval in ms (default 500). */
  interval?: number;
  /** Print nothing while waiting; the caller reports the outcome (`submit --wait`). */
  quiet?: boolean;
  /** How long to keep retrying while the server is unreachable (default 60 s): servers restart. */
  reconnectGraceMs?: number;
}

export interface WatchResult {
  /** The last view seen: terminal unless the watch was interrupted. */
  job: JobView;
  interrupted: boolean;
}

/**
 * Follows a job until it ends or `io.signal` aborts. On a TTY it redraws a progress line and the
 * stage table in place; elsewhere (pipes, CI logs) it prints one plain line per stage change, so
 * the output stays readable as a file.
 */
export async function watchJob(
  client: Pick<GantryClient, 'getJob'> & Partial<Pick<GantryClient, 'followEvents'>>,
  id: string,
  opts: WatchOptions & { io: CliIo },
): Promise<WatchResult> {
  const { io } = opts;
  const interval = opts.interval ?? 500;
  const grace = opts.reconnectGraceMs ?? 60_000;
  const now = io.now ?? Date.now;
  const redraws = !opts.quiet && !opts.json && canRedraw(io.stdout);
  const view = opts.quiet ? quietView() : opts.json ? jsonView(io) : redraws ? ttyView(io, now) : lineView(io, now);
  // With the event stream, the job is read again when one of its events arrives (and, on a
  // terminal, every 2 s for the clocks and progress bars, which change without events); a
  // server without it is polled as before.
  const live = client.followEvents ? eventWakeups(client as Pick<GantryClient, 'followEvents'>, { job: id }, { signal: io.signal }) : null;

  let job = await client.getJob(id);
  let lastContact = now();
  let interrupted = false;
  try {
    for (;;) {
      view.show(job);
      if (isTerminalJobState(job.state)) break;
      const woke = live && !live.failed() ? await live.next(redraws ? 2000 : 10_000) : await pollDelay(interval, io.signal);
      if (!woke) {
        interrupted = true;
        break;
      }
      try {
        job = await client.getJob(id);
        lastContact = now();
      } catch (e) {
        if (!(e instanceof ConnectionError) || now() - lastContact > grace) throw e;
        view.lostContact(e);
      }
    }
  } finally {
    view.close();
    live?.stop();
  }
  return { job, interrupted };
}

interface View {
  show(job: JobView): void;
  lostContact(e: ConnectionError): void;
  close(): void;
}

function quietView(): View {
  return { show() {}, lostContact() {}, close() {} };
}

function jsonView(io: CliIo): View {
  let last = '';
  return {
    show(job) {
      const line = JSON.stringify(job);
      if (line !== last) io.stdout.write(`${line}\n`);
      last = line;
    },
    lostContact() {},
    close() {},
  };
}

function ttyView(io: CliIo, now: () => number): View {
  const c = palette(io.color);
  // Only chosen when stdout is a TTY, and then it is process.stdout (or a test's stand-in).
  const log = createLogUpdate(io.stdout as NodeJS.WritableStream);
  let warning = '';
  return {
    show(job) {
      const t = now();
      const body = `${progressLine(job, t, c)}\n\n${renderStageTable(job, t, { color: io.color })}`;
      log(warning ? `${body}\n\n${c.yellow(warning)}` : body);
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
  const seen = new Map<string, string>();
  let jobState = '';
  let warned = false;
  const print = (text: string) => io.stdout.write(`${c.dim(clock(now()))} ${text}\n`);
  return {
    show(job) {
      warned = false;
      for (const stage of job.stages) {
        // The attempt number is in the key so that a retry that lands back in `running` between polls still shows.
        const key = `${stage.state}#${latestAttempt(stage)?.number ?? 0}`;
        if (seen.get(stage.name) === key) continue;
        seen.set(stage.name, key);
        print(stageLine(job, stage, now(), c));
      }
      if (job.state !== jobState) {
        jobState = job.state;
        if (isTerminalJobState(job.state)) {
          print(`job ${job.name} ${job.state}${job.failureReason ? `: ${job.failureReason}` : ''}`);
        }
      }
    },
    lostContact(e) {
      if (!warned) io.stderr.write(`${e.message}; retrying\n`);
      warned = true;
    },
    close() {},
  };
}

/** "train running on gpu-1 (h100:0,1)", "eval ready: waiting for 2 free h100 GPUs". */
function stageLine(job: JobView, stage: StageView, now: number, c: Colors): string {
  const attempt = latestAttempt(stage);
  let text = `${stage.name} ${stage.state}`;
  if (attempt && (stage.state === 'scheduled' || stage.state === 'running')) {
    const gpus = gpuText(attempt);
    text += ` on ${attempt.machine}${gpus === '-' ? '' : ` (${gpus})`}`;
    if (attempt.number > 1) text += ` [attempt ${attempt.number}]`;
  }
  if (stage.state === 'succeeded' && attempt?.startedAt != null && attempt.finishedAt !== null) {
    text += ` in ${formatDuration(attempt.finishedAt - attempt.startedAt)}`;
  }
  const reason = stageReason(job, stage, now);
  if (reason) text += `: ${stage.state === 'failed' ? c.red(reason) : reason}`;
  return text;
}

/** "14:03:27": the time at the start of a plain watch line. */
export function clock(t: number): string {
  const d = new Date(t);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

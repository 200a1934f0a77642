import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import { rankFollowState } from '../../api/contract/log-follow.js';
import { rankPrefixer } from '../../api/contract/rank-prefix.js';
import { InvalidArgumentError } from '@commander-js/extra-typings';
import { ApiError } from '../client/api-error.js';
import type { GantryClient, LogChunk } from '../client/gantry-client.js';
import { pollDelay } from '../client/poll-delay.js';
import type { CliIo } from '../render/cli-io.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { positiveInt } from './positive-int.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export interface LogsOptions extends ClientOptions {
  attempt?: number;
  /** A gang's member (default 0), or all of them interleaved, each line prefixed `[rank N] `. */
  rank?: number | 'all';
  follow?: boolean;
  /** Poll interval in ms while following a server without the log stream (default 500). */
  interval?: number;
}

export function logsCommand(program: CommandUnknownOpts): void {
  withClientOptions(
    program
      .command('logs')
      .description("Print a stage's stdout and stderr (its latest attempt unless --attempt is given)")
      .argument('<job>', 'job id')
      .argument('<stage>', 'stage name'),
  )
    .option('--attempt <n>', 'the log of this attempt (1, 2, ...) instead of the latest', positiveInt)
    .option('--rank <n|all>', "a gang's member (default 0: the rendezvous master), or all: every member's lines interleaved, each prefixed [rank N]", rankArg)
    .option('-f, --follow', 'keep printing new output until its log is complete: the stage (or --attempt) ended and its process gone (Ctrl-C stops following)')
    .addHelpText(
      'after',
      `
--follow streams the log live (server-sent events; a dropped connection is opened again after
the last chunk printed) and waits for a stage that has not started. With no --attempt, a retry's
output follows on after a "--- attempt N ---" line (on stderr). With --json, --follow prints one
chunk ({id, attemptNumber, stream, at, data}) per line.
A log longer than the server keeps (64 MiB by default) has its head and its last part (where a
failing run's error is), with a "[gantry: … cut here …]" line where the rest was dropped; while
the stage runs, past the head nothing more comes until it ends ("gantry status" says "log cut").
Exit codes: 0 printed, 4 no such job, stage, attempt or rank (or a stage that has not run,
without --follow), 5 server unreachable, 130 stopped following.

A gang stage (resources.machines, docs/gangs.md) has a log per member: rank 0's by default,
--rank 2 another's, --rank all every member's in the order stored (with --json each chunk has
its rank). With --follow, --rank all ends when every member's log is complete.

Examples:
  $ gantry logs j_01HZX3 train
  $ gantry logs j_01HZX3 train --attempt 1
  $ gantry logs j_01HZX3 train --rank all -f
  $ gantry logs j_01HZX3 train -f | grep loss`,
    )
    .action(async (job, stage, opts) => {
      await runAction((io) => runLogs(job, stage, opts, io), { interruptible: Boolean(opts.follow) });
    });
}

export async function runLogs(jobId: string, stage: string, opts: LogsOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const client = clientFor(opts);
    if (!opts.follow) {
      if (opts.json) {
        const chunks = await client.logChunks(jobId, stage, { attempt: opts.attempt, rank: opts.rank });
        io.stdout.write(`${JSON.stringify({ chunks }, null, 2)}\n`);
      } else {
        // The server prefixes every member's lines for rank=all (rank-prefix.ts).
        io.stdout.write(await client.logs(jobId, stage, { attempt: opts.attempt, rank: opts.rank }));
      }
      return ExitCode.ok;
    }
    return follow(client, jobId, stage, opts, io);
  });
}

/**
 * Prints the stage's log as it is written, until it is complete (contract/log-follow.ts): from the
 * server's log stream, or, from a server without it, by reading the log again every `interval`.
 */
async function follow(client: GantryClient, jobId: string, stageName: string, opts: LogsOptions, io: CliIo): Promise<number> {
  let attemptShown: number | undefined;
  let after: number | undefined;
  // Every member's lines, each said whose, as the server's text answer writes them.
  const prefix = opts.rank === 'all' ? rankPrefixer() : (c: LogChunk) => c.data;
  const print = (chunk: LogChunk) => {
    if (opts.json) {
      io.stdout.write(`${JSON.stringify(chunk)}\n`);
    } else {
      if (attemptShown !== undefined && chunk.attemptNumber !== attemptShown) io.stderr.write(`--- attempt ${chunk.attemptNumber} ---\n`);
      io.stdout.write(prefix(chunk));
    }
    attemptShown = chunk.attemptNumber;
    after = chunk.id;
  };
  const stop = new AbortController();
  io.signal?.addEventListener('abort', () => stop.abort(), { once: true });
  let end: Awaited<ReturnType<GantryClient['followLog']>>;
  try {
    end = await client.followLog(
      jobId,
      stageName,
      { attempt: opts.attempt, rank: opts.rank },
      {
        signal: stop.signal,
        onChunk: print,
        onDrop: (why) => io.stderr.write(`gantry: log stream dropped (${why}); reconnecting\n`),
      },
    );
  } catch (e) {
    // A server without the stream says a stage that has not run yet has no log (404); this one
    // waits for it. Reading on finds out which: a stage or job that is not there is a 404 again.
    if (!(e instanceof ApiError && e.status === 404 && opts.attempt === undefined)) throw e;
    end = 'not-a-stream';
  }
  if (end === 'not-a-stream') return poll(client, jobId, stageName, opts, io, print, after);
  return end === null ? ExitCode.interrupted : ExitCode.ok;
}

/** A server without the log stream: the stage's state, then its new chunks, every `interval`. */
async function poll(
  client: GantryClient,
  jobId: string,
  stageName: string,
  opts: LogsOptions,
  io: CliIo,
  print: (c: LogChunk) => void,
  from: number | undefined,
): Promise<number> {
  const interval = opts.interval ?? 500;
  let after = from;
  let endedPolls = 0;
  for (;;) {
    // Read the stage's state before its chunks: output written before it ended is then in this fetch or an earlier one.
    const job = await client.getJob(jobId);
    const stage = job.stages.find((s) => s.name === stageName);
    // Unknown stage: the logs request reports it as a 404 with the server's wording.
    const state = stage ? rankFollowState(stage, opts.attempt, opts.rank ?? 0, (a) => a.gangRank ?? 0) : { attempt: null, ended: false, missing: true };
    // Not run yet: nothing to read, wait for its first attempt (the server says 404 for its log).
    if (!state.attempt && !state.missing) {
      if (state.ended) return ExitCode.ok;
      if (!(await pollDelay(interval, io.signal))) return ExitCode.interrupted;
      continue;
    }
    for (const chunk of await client.logChunks(jobId, stageName, { attempt: opts.attempt, rank: opts.rank, after })) {
      print(chunk);
      after = chunk.id;
    }
    // One more poll after the end: an agent may ship its last output just after reporting the exit.
    if (state.ended && ++endedPolls > 1) return ExitCode.ok;
    if (!(await pollDelay(interval, io.signal))) return ExitCode.interrupted;
  }
}

/** `--rank`: a member's rank (0 or more) or `all`; anything else is a usage error naming the option. */
export function rankArg(value: string): number | 'all' {
  if (value.trim() === 'all') return 'all';
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n)) throw new InvalidArgumentError("must be a gang member's rank (0, 1, ...) or all");
  return n;
}

import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import { GantryClient } from '../client/gantry-client.js';
import { pollDelay } from '../client/poll-delay.js';
import type { CliIo } from '../render/cli-io.js';
import { isActiveAttemptState, isTerminalStageState } from '../../api/contract/states.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { positiveInt } from './positive-int.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export interface LogsOptions extends ClientOptions {
  attempt?: number;
  follow?: boolean;
  /** Poll interval in ms while following (default 500). */
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
    .option('-f, --follow', 'keep printing new output until the stage ends (Ctrl-C stops following)')
    .addHelpText(
      'after',
      `
With --follow and no --attempt, a retry's output follows on after a "--- attempt N ---" line (on
stderr). With --json, --follow prints one chunk ({id, attemptNumber, stream, at, data}) per line.
Exit codes: 0 printed, 4 no such job or stage, 5 server unreachable, 130 stopped following.

Examples:
  $ gantry logs j_01HZX3 train
  $ gantry logs j_01HZX3 train --attempt 1
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
        const chunks = await client.logChunks(jobId, stage, { attempt: opts.attempt });
        io.stdout.write(`${JSON.stringify({ chunks }, null, 2)}\n`);
      } else {
        io.stdout.write(await client.logs(jobId, stage, { attempt: opts.attempt }));
      }
      return ExitCode.ok;
    }
    return follow(client, jobId, stage, opts, io);
  });
}

async function follow(client: GantryClient, jobId: string, stageName: string, opts: LogsOptions, io: CliIo): Promise<number> {
  const interval = opts.interval ?? 500;
  let after: number | undefined;
  let attemptShown: number | undefined;
  let endedPolls = 0;
  for (;;) {
    // Read the stage's state before its chunks: output written before it ended is then in this fetch or an earlier one.
    const { ended, started } = await stageEnded(client, jobId, stageName, opts.attempt);
    // Not run yet: nothing to read, wait for its first attempt (the server says 404 for its log).
    if (!started) {
      if (ended) return ExitCode.ok;
      if (!(await pollDelay(interval, io.signal))) return ExitCode.interrupted;
      continue;
    }
    const chunks = await client.logChunks(jobId, stageName, { attempt: opts.attempt, after });
    for (const chunk of chunks) {
      if (opts.json) {
        io.stdout.write(`${JSON.stringify(chunk)}\n`);
      } else {
        if (attemptShown !== undefined && chunk.attemptNumber !== attemptShown) io.stderr.write(`--- attempt ${chunk.attemptNumber} ---\n`);
        io.stdout.write(chunk.data);
      }
      attemptShown = chunk.attemptNumber;
      after = chunk.id;
    }
    // One more poll after the end: an agent may ship its last output just after reporting the exit.
    if (ended && ++endedPolls > 1) return ExitCode.ok;
    if (!(await pollDelay(interval, io.signal))) return ExitCode.interrupted;
  }
}

/**
 * Whether the log followed is complete: the stage (or the attempt asked for) has ended and the
 * attempt's process is gone (released: its agent ships the last output, say a canceled stage's
 * lines in its kill grace, before it stops listing it). `started`: it has an attempt to read.
 */
async function stageEnded(client: GantryClient, jobId: string, stageName: string, attempt: number | undefined): Promise<{ ended: boolean; started: boolean }> {
  const job = await client.getJob(jobId);
  const stage = job.stages.find((s) => s.name === stageName);
  // Unknown: the logs request reports it as a 404 with the server's wording.
  if (!stage) return { ended: false, started: true };
  const latest = stage.attempts.at(-1);
  const a = attempt !== undefined ? stage.attempts.find((x) => x.number === attempt) : latest;
  if (attempt !== undefined && !a) return { ended: false, started: true };
  if (!a) return { ended: isTerminalStageState(stage.state), started: false };
  // A server older than releasedAt sends none (undefined): the end of the stage is all it can tell.
  const gone = a.releasedAt !== null;
  const over = attempt !== undefined ? !isActiveAttemptState(a.state) : isTerminalStageState(stage.state);
  return { ended: over && gone, started: true };
}

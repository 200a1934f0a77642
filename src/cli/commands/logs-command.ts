import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import { GantryClient } from '../client/gantry-client.js';
import { pollDelay } from '../client/poll-delay.js';
import type { CliIo } from '../render/cli-io.js';
import { isTerminalStageState } from '../render/terminal-states.js';
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
    const ended = await stageEnded(client, jobId, stageName, opts.attempt);
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

async function stageEnded(client: GantryClient, jobId: string, stageName: string, attempt: number | undefined): Promise<boolean> {
  const job = await client.getJob(jobId);
  const stage = job.stages.find((s) => s.name === stageName);
  // The logs request that follows reports an unknown stage as a 404 with the server's wording.
  if (!stage) return false;
  if (attempt !== undefined) {
    const a = stage.attempts.find((x) => x.number === attempt);
    if (a && a.state !== 'scheduled' && a.state !== 'running') return true;
  }
  return isTerminalStageState(stage.state);
}

import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { CliIo } from '../render/cli-io.js';
import { isTerminalJobState } from '../../api/contract/states.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export function cancelCommand(program: CommandUnknownOpts): void {
  withClientOptions(
    program.command('cancel').description('Cancel a job: nothing new starts, running stages are stopped (TERM, grace, KILL)').argument('<job>', 'job id'),
  )
    .addHelpText(
      'after',
      `
Canceling a job that has already ended is not an error; it says so and exits 0.
Exit codes: 0 canceled or already ended, 4 no such job, 5 server unreachable.

Examples:
  $ gantry cancel j_01HZX3
  $ gantry list --state queued --json | jq -r '.jobs[].id' | xargs -n1 gantry cancel`,
    )
    .action(async (job, opts) => {
      await runAction((io) => runCancel(job, opts, io));
    });
}

export async function runCancel(jobId: string, opts: ClientOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const r = await clientFor(opts).cancel(jobId);
    if (opts.json) io.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
    else if (r.changed) io.stdout.write(`canceled ${r.job.id}\n`);
    else if (isTerminalJobState(r.job.state)) io.stdout.write(`${r.job.id} had already ended (${r.job.state})\n`);
    else io.stdout.write(`${r.job.id} is already being canceled (${r.job.state})\n`);
    return ExitCode.ok;
  });
}

import { Option, type CommandUnknownOpts } from '@commander-js/extra-typings';
import type { CliIo } from '../render/cli-io.js';
import { renderJobList } from '../render/job-list-table.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { positiveInt } from './positive-int.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

// The wire's job states (the server's list); checked here so a typo gets one clear line, not a schema dump.
const JOB_STATES = ['submitted', 'queued', 'scheduled', 'running', 'succeeded', 'failed', 'canceled'] as const;

export interface ListOptions extends ClientOptions {
  state?: string;
  team?: string;
  limit?: number;
}

export function listCommand(program: CommandUnknownOpts): void {
  withClientOptions(program.command('list').alias('ls').description('List jobs, newest first'))
    .addOption(new Option('--state <state>', 'only jobs in this state').choices(JOB_STATES))
    .option('--team <team>', "only this team's jobs")
    .option('--limit <n>', 'at most this many jobs (server default 50, max 1000)', positiveInt)
    .addHelpText(
      'after',
      `
Examples:
  $ gantry list
  $ gantry list --state running --team vision
  $ gantry list --state failed --limit 5 --json | jq -r '.jobs[].id'`,
    )
    .action(async (opts) => {
      await runAction((io) => runList(opts, io));
    });
}

export async function runList(opts: ListOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const jobs = await clientFor(opts).listJobs({ state: opts.state, team: opts.team, limit: opts.limit });
    if (opts.json) {
      io.stdout.write(`${JSON.stringify({ jobs }, null, 2)}\n`);
    } else if (jobs.length === 0) {
      io.stderr.write('no jobs\n');
    } else {
      io.stdout.write(`${renderJobList(jobs, (io.now ?? Date.now)(), { color: io.color })}\n`);
    }
    return ExitCode.ok;
  });
}

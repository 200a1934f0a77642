import { Option, type CommandUnknownOpts } from '@commander-js/extra-typings';
import { JOB_STATES } from '../../api/contract/states.js';
import type { CliIo } from '../render/cli-io.js';
import { renderJobList } from '../render/job-list-table.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { positiveInt } from './positive-int.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';
import { unknownFilter } from './unknown-filter.js';

export interface ListOptions extends ClientOptions {
  state?: string;
  team?: string;
  name?: string;
  limit?: number;
  before?: string;
}

export function listCommand(program: CommandUnknownOpts): void {
  withClientOptions(program.command('list').alias('ls').description('List jobs, newest first'))
    .addOption(new Option('--state <state>', 'only jobs in this state').choices(JOB_STATES))
    .option('--team <team>', "only this team's jobs")
    .option('--name <text>', 'only jobs whose name holds this text (any case)')
    .option('--limit <n>', 'at most this many jobs (default 50; past 1,000 it reads page after page)', positiveInt)
    .option('--before <job>', 'the jobs listed after this one (the last id of the previous page)')
    .addHelpText(
      'after',
      `
Examples:
  $ gantry list
  $ gantry list --state running --team vision
  $ gantry list --name resnet
  $ gantry list --state failed --limit 5 --json | jq -r '.jobs[].id'`,
    )
    .action(async (opts) => {
      await runAction((io) => runList(opts, io));
    });
}

export async function runList(opts: ListOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const client = clientFor(opts);
    // Pages of at most 1,000 (the server's cap), each after the last job of the one before.
    const want = opts.limit ?? 50;
    const jobs: Awaited<ReturnType<typeof client.listJobs>> = [];
    let before = opts.before;
    while (jobs.length < want) {
      const ask = Math.min(1000, want - jobs.length);
      const page = await client.listJobs({ state: opts.state, team: opts.team, name: opts.name, limit: ask, ...(before ? { before } : {}) });
      jobs.push(...page);
      if (page.length < ask) break;
      before = page.at(-1)!.id;
    }
    if (opts.json) {
      io.stdout.write(`${JSON.stringify({ jobs }, null, 2)}\n`);
    } else if (jobs.length === 0) {
      // No jobs of a team the server does not know is a typo: say so (asked only then: it costs a request).
      const unknown = opts.team !== undefined ? await unknownFilter(client, { team: opts.team }) : null;
      if (unknown) {
        io.stderr.write(`gantry: ${unknown}\n`);
        return ExitCode.usage;
      }
      io.stderr.write('no jobs\n');
    } else {
      io.stdout.write(`${renderJobList(jobs, (io.now ?? Date.now)(), { color: io.color })}\n`);
    }
    return ExitCode.ok;
  });
}

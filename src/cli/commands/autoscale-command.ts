import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { CliIo } from '../render/cli-io.js';
import { renderAutoscale } from '../render/autoscale-text.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { positiveInt } from './positive-int.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export function autoscaleCommand(program: CommandUnknownOpts): void {
  withClientOptions(
    program
      .command('autoscale')
      .description('The autoscaled pools: provider, min/max, desired/current/starting machines; the machines started; the latest decisions and why')
      .option(
        '--decisions <n>',
        'how many of the latest decisions to print (the server sends the latest 50; gantry events --follow shows them as they come)',
        positiveInt,
        10,
      ),
  )
    .addHelpText(
      'after',
      `
Pools are declared in the cluster file's pools: section (docs/autoscaling.md). Per pool:
DESIRED counts what counts toward min and max (provisioning, joining, ready), CURRENT the ready
ones (joined, taking work), STARTING those on their way in (provisioning, joining).
Machines: each one the autoscaler started and has not released, with its LIFECYCLE
(provisioning, joining, ready, draining, failed), how long it has been so, how many waiting
stages it is HELD for, the attempts on it, and why it FAILED (did not join within its boot
timeout, the provider refused). Then the latest decisions, newest first, each with its reason.
\`gantry explain JOB STAGE\` says what the autoscaler does for one waiting stage.

Exit codes: 0 shown (also when no pool is autoscaled: it says so), 5 server unreachable, 6 denied.

Examples:
  $ gantry autoscale
  $ gantry autoscale --decisions 50
  $ gantry autoscale --json | jq '.pools[] | {name, desired, current, starting}'
  $ gantry autoscale --json | jq -r '.machines[] | select(.lifecycle == "failed") | "\\(.name): \\(.failReason)"'`,
    )
    .action(async (opts) => {
      await runAction((io) => runAutoscale(opts, io));
    });
}

export async function runAutoscale(opts: ClientOptions & { decisions?: number }, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const view = await clientFor(opts).autoscale();
    if (opts.json) {
      io.stdout.write(`${JSON.stringify(view, null, 2)}\n`);
      return ExitCode.ok;
    }
    if (view.note) io.stderr.write(`${view.note}\n`);
    const text = renderAutoscale(view, (io.now ?? Date.now)(), { color: io.color, decisions: opts.decisions });
    if (text) io.stdout.write(`${text}\n`);
    return ExitCode.ok;
  });
}

import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { CliIo } from '../render/cli-io.js';
import { renderMachineTable } from '../render/machine-table.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export function machinesCommand(program: CommandUnknownOpts): void {
  withClientOptions(program.command('machines').description('List machines: status, allocated/total CPU, memory and GPUs, what each enforces, last heartbeat'))
    .addHelpText(
      'after',
      `
STATUS is the machine's health (ready, suspect, lost), then, when an operator took it out of
service, how: cordoned, draining, or drained (draining, and nothing runs there any more), as in
"ready,cordoned". \`gantry machine --help\` shows how. Removed machines are not listed.
GPUs marked "(declared)" were declared by flag or cluster file rather than found by nvidia-smi.
CONTAIN is what the machine's agent enforces on every stage (docs/containment.md): "mem,cpu,pids,dev"
with only those it limits, "none" when it limits nothing, "?" when its agent did not say (one
before containment). \`gantry machine show NAME\` shows how, and why something is not enforced;
--json has the whole report in each machine's "containment".
POOL and LIFECYCLE appear when the autoscaler started some machine (docs/autoscaling.md): the
pool that started it and where it is in its life (joining, ready, draining, …); \`gantry
autoscale\` shows the pools, the machines still on their way in and the decisions.

Examples:
  $ gantry machines
  $ gantry machines --json | jq -r '.machines[] | select(.health != "ready" or .scheduling != "eligible") | .name'
  $ gantry machines --json | jq -r '.machines[] | select(.containment.memory != true) | .name'`,
    )
    .action(async (opts) => {
      await runAction((io) => runMachines(opts, io));
    });
}

export async function runMachines(opts: ClientOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const machines = await clientFor(opts).machines();
    if (opts.json) io.stdout.write(`${JSON.stringify({ machines }, null, 2)}\n`);
    else if (machines.length === 0) io.stderr.write('no machines have registered yet; run `gantry agent --server URL` on each machine\n');
    else io.stdout.write(`${renderMachineTable(machines, (io.now ?? Date.now)(), { color: io.color })}\n`);
    return ExitCode.ok;
  });
}

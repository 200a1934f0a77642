import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import { cancelCommand } from './cancel-command.js';
import { ExitCode } from './exit-codes.js';
import { listCommand } from './list-command.js';
import { logsCommand } from './logs-command.js';
import { machineCommand } from './machine-command.js';
import { machinesCommand } from './machines-command.js';
import { statusCommand } from './status-command.js';
import { submitCommand } from './submit-command.js';
import { tokenCommand } from './token-command.js';
import { teamCommand } from './team-command.js';
import { eventsCommand } from './events-command.js';
import { jobFilesCommands } from './job-files-commands.js';
import { auditCommand } from './audit-command.js';
import { explainCommand } from './explain-command.js';
import { rerunCommand } from './rerun-command.js';
import { gcCommand } from './gc-command.js';
import { autoscaleCommand } from './autoscale-command.js';

const registrations = [
  submitCommand,
  rerunCommand,
  statusCommand,
  explainCommand,
  listCommand,
  cancelCommand,
  logsCommand,
  eventsCommand,
  jobFilesCommands,
  gcCommand,
  machinesCommand,
  machineCommand,
  autoscaleCommand,
  teamCommand,
  tokenCommand,
  auditCommand,
];

/**
 * Adds the commands that talk to a running server: submit, rerun, status, list, cancel, logs, gc, machines,
 * machine (cordon, uncordon, drain, remove), autoscale. Commander exits 1 on a usage error; these commands
 * promise 2 for that (exit-codes.ts), so each, and each of its subcommands, gets an exit override.
 * It replaces any override the program set before this call.
 */
export function registerClientCommands(program: CommandUnknownOpts): void {
  const before = new Set(program.commands);
  for (const register of registrations) register(program);
  const override = (cmd: CommandUnknownOpts) => {
    cmd.exitOverride((err) => {
      // exitCode 0 is --help; everything else commander reports is a usage error.
      process.exit(err.exitCode === 0 ? 0 : ExitCode.usage);
    });
    for (const sub of cmd.commands) override(sub);
  };
  for (const cmd of program.commands) if (!before.has(cmd)) override(cmd);
}

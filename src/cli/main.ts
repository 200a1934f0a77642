#!/usr/bin/env node
import { Command } from '@commander-js/extra-typings';
import { API_VERSION } from '../api/contract/api-version.js';
import { ValidationError } from '../spec/validation-error.js';
import { errorText } from '../lib/error-text.js';
import { agentCommand } from '../agent/agent-command.js';
import { ExitCode } from './commands/exit-codes.js';

// `gantry events | head`: once the reader is gone every write fails with EPIPE; a Unix tool dies
// quietly of SIGPIPE there (status 141), not with a stack trace. Once, here, for every command.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(ExitCode.brokenPipe);
  throw err;
});

const program = new Command().name('gantry').description('Gantry: multi-stage jobs on GPU and CPU clusters.\nEvery command takes --help.').version(API_VERSION);
// An agent forks a process for every stage it starts, and a fork costs in proportion to the
// forking process's memory: `gantry agent` loads only its own code (58 MB idle, rather than 87 MB).
if (process.argv[2] === 'agent') {
  agentCommand(program);
} else {
  (await import('../server/up-command.js')).upCommand(program);
  (await import('../server/server-command.js')).serverCommand(program);
  (await import('../server/migrate-command.js')).migrateCommand(program);
  agentCommand(program);
  (await import('../sim/sim-command.js')).simCommand(program);
  (await import('./commands/register-client-commands.js')).registerClientCommands(program);
}

program.parseAsync(process.argv).catch((err: unknown) => {
  // Usage and input errors get exit code 2 and a message naming the problem; nothing else prints a stack.
  if (err instanceof ValidationError) {
    process.stderr.write(`gantry: ${err.issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('\n  ')}\n`);
    process.exit(2);
  }
  process.stderr.write(`gantry: ${errorText(err)}\n`);
  process.exit(1);
});

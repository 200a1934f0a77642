#!/usr/bin/env node
import { Command } from '@commander-js/extra-typings';
import { API_VERSION } from '../api/build-api.js';
import { ValidationError } from '../domain/errors.js';
import { agentCommand } from './commands/agent-command.js';
import { registerClientCommands } from './commands/register-client-commands.js';
import { serverCommand } from './commands/server-command.js';
import { upCommand } from './commands/up-command.js';

const program = new Command()
  .name('gantry')
  .description('Gantry: multi-stage jobs on GPU and CPU clusters.\nEvery command takes --help.')
  .version(API_VERSION);
upCommand(program);
serverCommand(program);
agentCommand(program);
registerClientCommands(program);

program.parseAsync(process.argv).catch((err: unknown) => {
  // Usage and input errors get exit code 2 and a message naming the problem; nothing else prints a stack.
  if (err instanceof ValidationError) {
    process.stderr.write(`gantry: ${err.issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('\n  ')}\n`);
    process.exit(2);
  }
  process.stderr.write(`gantry: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});

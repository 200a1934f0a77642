import { ApiError } from '../client/api-error.js';
import { ConnectionError } from '../client/connection-error.js';
import type { CliIo } from '../render/cli-io.js';
import { errorText } from '../../lib/error-text.js';
import { InsecureTransportError } from './client-options.js';
import { ExitCode } from './exit-codes.js';

/** Prints an error the way a person can act on it and returns the exit code it maps to. */
export function reportError(e: unknown, io: CliIo): ExitCode {
  const say = (line: string) => io.stderr.write(`gantry: ${line}\n`);
  if (e instanceof ConnectionError) {
    say(e.message);
    return ExitCode.unreachable;
  }
  if (e instanceof InsecureTransportError) {
    say(e.message);
    return ExitCode.denied;
  }
  if (e instanceof ApiError) {
    // Schema errors can repeat one line per alternative tried; once is enough.
    const issues = [...new Map((e.body.issues ?? []).map((i) => [`${i.path}\0${i.message}`, i])).values()];
    // The message of a 400 joins its issues into one line; one issue a line reads better.
    say(issues.length > 0 ? 'the server rejected the request:' : e.body.message);
    for (const issue of issues) io.stderr.write(`  ${issue.path ? `${issue.path}: ` : ''}${issue.message}\n`);
    if (e.status === 404) return ExitCode.notFound;
    if (e.status === 401 || e.status === 403) return ExitCode.denied;
    if (e.status >= 400 && e.status < 500) return ExitCode.usage;
    return ExitCode.failed;
  }
  say(errorText(e));
  return ExitCode.failed;
}

/** Runs a command body, turning any error into its message and exit code. */
export async function reportingErrors(io: CliIo, body: () => Promise<number>): Promise<number> {
  try {
    return await body();
  } catch (e) {
    return reportError(e, io);
  }
}

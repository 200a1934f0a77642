import type { GantryClient } from '../client/gantry-client.js';
import type { CliIo } from '../render/cli-io.js';
import { watchJob } from '../render/watch-job.js';
import { ExitCode, exitCodeForJobState } from './exit-codes.js';

/**
 * `--wait` / `--watch` on a job a command just made (submit, rerun): follows it to its end and
 * returns the exit code its end state maps to (130 when the user stopped watching). `--json` with
 * --watch: one JobView per change; with --wait: the final one.
 */
export async function followJob(client: GantryClient, jobId: string, opts: { watch?: boolean; json?: boolean; interval?: number }, io: CliIo): Promise<number> {
  const watching = Boolean(opts.watch);
  const { job: last, interrupted } = await watchJob(client, jobId, { io, interval: opts.interval, json: opts.json && watching, quiet: !watching });
  if (interrupted) {
    io.stderr.write(`stopped watching ${jobId}; it keeps running (gantry cancel ${jobId} stops it)\n`);
    return ExitCode.interrupted;
  }
  if (opts.json && !watching) io.stdout.write(`${JSON.stringify(last, null, 2)}\n`);
  // A plain-line watch already printed the outcome; elsewhere say it once, with the reason.
  if (!opts.json && !(watching && !io.stdout.isTTY)) {
    io.stderr.write(`job ${last.id} ${last.state}${last.failureReason ? `: ${last.failureReason}` : ''}\n`);
  }
  return exitCodeForJobState(last.state);
}

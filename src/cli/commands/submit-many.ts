import { ApiError } from '../client/api-error.js';
import { clientFor } from './client-options.js';
import type { CliIo } from '../render/cli-io.js';
import { stateCounts, watchJobs, type JobOutcome } from '../render/watch-jobs.js';
import { ExitCode, exitCodeForJobStates } from './exit-codes.js';
import { reportingErrors } from './report-error.js';
import { printWarnings, type SubmitOptions } from './submit-command.js';

/** Failed and canceled jobs named one a line at the end of a wait, at most this many. */
const MAX_NAMED = 10;

/**
 * `gantry submit` of a file with several jobs (a `jobs:` list, `---` documents, a sweep): one
 * batch, all or none. Prints the ids one a line (`--json`: the list); `--wait`/`--watch` follow
 * them all and exit 0 if all succeeded, 1 if any failed, 3 if any was canceled (and none failed).
 */
export async function submitMany(file: string, specs: readonly unknown[], opts: SubmitOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const client = clientFor(opts);
    let jobs: { id: string; name: string; warnings?: { stage: string; message: string }[] }[];
    try {
      jobs = (await client.submitBatch(specs, { strict: opts.strict })).jobs;
    } catch (e) {
      if (e instanceof ApiError && (e.status === 400 || e.status === 413)) {
        io.stderr.write(`${file}: invalid job specs; none was submitted\n`);
        const issues = e.body.issues?.length ? e.body.issues : [{ path: '', message: e.body.message }];
        for (const i of issues) io.stderr.write(`  ${i.path ? `${i.path}: ` : ''}${i.message}${jobNamed(i.path, specs)}\n`);
        return ExitCode.usage;
      }
      throw e;
    }

    for (const j of jobs) printWarnings(io, j);
    const waiting = Boolean(opts.wait || opts.watch);
    if (opts.json && !waiting) io.stdout.write(`${JSON.stringify(jobs, null, 2)}\n`);
    if (!opts.json) io.stdout.write(jobs.map((j) => `${j.id}\n`).join(''));
    if (!waiting) return ExitCode.ok;

    const watching = Boolean(opts.watch);
    const { jobs: last, interrupted } = await watchJobs(client, jobs, { io, interval: opts.interval, json: opts.json && watching, quiet: !watching });
    if (interrupted) {
      io.stderr.write(`stopped watching ${jobs.length} jobs; they keep running (gantry cancel JOB stops one)\n`);
      return ExitCode.interrupted;
    }
    if (opts.json) io.stdout.write(watching ? `${JSON.stringify(last)}\n` : `${JSON.stringify(last, null, 2)}\n`);
    else io.stderr.write(summary(last));
    return exitCodeForJobStates(last.map((j) => j.state));
  });
}

/** " (job train-lr_0.1)" for an issue under /jobs/N, so a sweep's job can be found by its name. */
function jobNamed(path: string, specs: readonly unknown[]): string {
  const m = /^\/jobs\/(\d+)(\/|$)/.exec(path);
  const spec = m ? specs[Number(m[1])] : undefined;
  const name = typeof spec === 'object' && spec !== null ? (spec as { name?: unknown }).name : undefined;
  return typeof name === 'string' ? ` (job ${name})` : '';
}

/** "3 jobs: 2 succeeded, 1 failed", then each job that did not succeed. */
function summary(jobs: readonly JobOutcome[]): string {
  const lines = [
    `${jobs.length} jobs: ${stateCounts(jobs)
      .map(([s, n]) => `${n} ${s}`)
      .join(', ')}`,
  ];
  const bad = jobs.filter((j) => j.state !== 'succeeded');
  for (const j of bad.slice(0, MAX_NAMED)) lines.push(`job ${j.id} (${j.name}) ${j.state}${j.failureReason ? `: ${j.failureReason}` : ''}`);
  if (bad.length > MAX_NAMED) lines.push(`… and ${bad.length - MAX_NAMED} more`);
  return lines.map((l) => `${l}\n`).join('');
}

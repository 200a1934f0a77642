import { readFile } from 'node:fs/promises';
import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { JobView } from '../../api/contract/job-view.js';
import { parseJobFile, type JobFile } from '../../spec/job-file.js';
import { errorText } from '../../lib/error-text.js';
import { ApiError } from '../client/api-error.js';
import type { CliIo } from '../render/cli-io.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { followJob } from './follow-job.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';
import { submitMany } from './submit-many.js';

export interface SubmitOptions extends ClientOptions {
  wait?: boolean;
  watch?: boolean;
  /** Poll interval in ms while waiting (default 500). */
  interval?: number;
  /** Refuse a job with a stage no registered machine could ever run, or more than its team's whole quota, rather than warn. */
  strict?: boolean;
}

/** Each warning of a submit's answer, on stderr: the job is accepted, but that stage would wait for good. */
export function printWarnings(io: CliIo, job: { id: string; name: string; warnings?: { stage: string; message: string }[] }): void {
  for (const w of job.warnings ?? [])
    io.stderr.write(`gantry: warning: job ${job.name} (${job.id}) stage ${w.stage}: ${w.message}; it waits until that changes (--strict refuses instead)\n`);
}

export function submitCommand(program: CommandUnknownOpts): void {
  withClientOptions(
    program
      .command('submit')
      .description('Submit a job spec (YAML or JSON), several, or a sweep, and print the new job ids')
      .argument('<file>', 'job spec file (.yaml, .yml or .json): one spec, a `jobs:` list, `---`-separated specs, or a sweep'),
  )
    .option('--wait', 'wait for the job (every job) to end; the exit code reports how it ended')
    .option('--watch', 'show the stages live until the job ends (several jobs: counts by state) (implies --wait)')
    .option(
      '--strict',
      "refuse a job with a stage that no registered machine could ever run, or that asks for more than its team's whole quota (default: accept it with a warning)",
    )
    .addHelpText(
      'after',
      `
The spec is checked locally first (syntax errors show file, line and column; so do the server's
bounds: nesting past 32 levels, more than 100,000 values, 500,000 in a file of several jobs, more
than 100 YAML anchors or aliases), then by the server (every problem, with its path). Ctrl-C while waiting stops watching; the job keeps running.
--json prints the new JobView; with --wait the final one; with --watch one JobView per change (NDJSON).

Several jobs: a file with a \`jobs:\` list of specs, or several specs separated by \`---\`, is sent as
one batch, all or nothing (at most 10,000 jobs); the ids are printed one a line (--json: a list of
{id, name}). A spec with a top-level \`sweep:\` map (parameter -> list of values) becomes one job per
combination, named <name>-<param>_<value>-…, with \`\${sweep.NAME}\` replaced in its stages' command
items and env values (\`$\${sweep.\` for a literal one). --wait/--watch follow every job: exit 0 if all
succeeded, 1 if any failed, 3 if any was canceled; --watch shows the counts by state (--json: NDJSON
counts, then the final list).

A stage that no registered machine could ever run (a GPU type nobody has, more GPUs than any
machine), or that is not preemptible and asks for more than its team's whole quota of a resource
(4 h100 GPUs against a quota of 2), is accepted with a warning on stderr naming it and why; --strict
refuses the submit instead (exit 2), and nothing is written.

Exit codes: 0 submitted (or, when waiting, succeeded), 1 failed, 2 invalid spec, unreadable file or refused by --strict,
3 canceled, 5 server unreachable, 130 stopped watching.

Examples:
  $ gantry submit examples/pipeline.yaml
  $ gantry submit train.yaml --watch
  $ id=$(gantry submit train.yaml) && gantry status "$id"
  $ gantry submit train.yaml --wait --json | jq .state
  $ gantry submit sweep.yaml --watch          # sweep: { lr: [0.1, 0.01], seed: [1, 2, 3] }`,
    )
    .action(async (file, opts) => {
      await runAction((io) => runSubmit(file, opts, io), { interruptible: Boolean(opts.wait || opts.watch) });
    });
}

/** `gantry submit`: returns the exit code (see exit-codes.ts) instead of exiting, for in-process use. */
export async function runSubmit(file: string, opts: SubmitOptions, io: CliIo): Promise<number> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    io.stderr.write(`gantry: cannot read ${file}: ${describeFsError(e)}\n`);
    return ExitCode.usage;
  }

  let parsed: JobFile;
  try {
    parsed = parseJobFile(text, file);
  } catch (e) {
    // Messages without a path already carry the file name, line and column.
    for (const issue of issuesOf(e)) io.stderr.write(`gantry: ${issue.path ? `${file}: ${issue.path}: ` : ''}${issue.message}\n`);
    return ExitCode.usage;
  }
  if (!parsed.single) return submitMany(file, parsed.specs, opts, io);
  const spec = parsed.specs[0];

  return reportingErrors(io, async () => {
    const client = clientFor(opts);
    let job: JobView;
    try {
      job = await client.submit(spec, { strict: opts.strict });
    } catch (e) {
      if (e instanceof ApiError && (e.status === 400 || e.status === 413)) {
        io.stderr.write(`${file}: invalid job spec\n`);
        const issues = e.body.issues?.length ? e.body.issues : [{ path: '', message: e.body.message }];
        for (const i of issues) io.stderr.write(`  ${i.path ? `${i.path}: ` : ''}${i.message}\n`);
        return ExitCode.usage;
      }
      throw e;
    }

    printWarnings(io, job);
    const waiting = Boolean(opts.wait || opts.watch);
    if (opts.json && !waiting) io.stdout.write(`${JSON.stringify(job, null, 2)}\n`);
    if (!opts.json) io.stdout.write(`${job.id}\n`);
    if (!waiting) return ExitCode.ok;

    return followJob(client, job.id, opts, io);
  });
}

function issuesOf(e: unknown): { path?: string; message: string }[] {
  const issues = (e as { issues?: unknown }).issues;
  if (Array.isArray(issues) && issues.length > 0) return issues as { path?: string; message: string }[];
  return [{ message: errorText(e) }];
}

function describeFsError(e: unknown): string {
  const code = (e as { code?: string }).code;
  if (code === 'ENOENT') return 'no such file';
  if (code === 'EISDIR') return 'is a directory';
  if (code === 'EACCES') return 'permission denied';
  return errorText(e);
}

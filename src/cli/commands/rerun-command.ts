import { readFile } from 'node:fs/promises';
import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import { parseDocument } from 'yaml';
import type { RerunRequest, RerunResult } from '../../api/contract/rerun.js';
import type { CliIo } from '../render/cli-io.js';
import { renderRerunPlan } from '../render/rerun-plan.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { followJob } from './follow-job.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';
import { errorText } from '../../lib/error-text.js';

export interface RerunOptions extends ClientOptions {
  from?: string[];
  spec?: string;
  cancelRunning?: boolean;
  dryRun?: boolean;
  wait?: boolean;
  watch?: boolean;
  /** Poll interval in ms while waiting (default 500). */
  interval?: number;
}

/** `--from a --from b` and `--from a,b` alike. */
function collectStages(value: string, previous: string[] = []): string[] {
  return [
    ...previous,
    ...value
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  ];
}

export function rerunCommand(program: CommandUnknownOpts): void {
  withClientOptions(
    program
      .command('rerun')
      .description('Rerun a job from a stage: a new job that reuses the committed outputs of every stage it does not run again')
      .argument('<job>', 'the job to rerun (it must have ended, or give --cancel-running)'),
  )
    .option(
      '--from <stage>',
      'run this stage again, and everything downstream of it (repeat, or a,b); default: every failed, skipped or canceled stage',
      collectStages,
    )
    .option(
      '--spec <file>',
      "the job's spec with fixes (YAML or JSON): only the stages that run again may change (command, env, resources, …), and the job's priority and labels",
    )
    .option('--cancel-running', 'a job still running is canceled first (its running stages stopped), in the same step')
    .option('--dry-run', 'print the plan only: what is reused, what runs, the GPU-hours saved; nothing is submitted')
    .option('--wait', 'wait for the new job to end; the exit code reports how it ended')
    .option('--watch', "show the new job's stages live until it ends (implies --wait)")
    .addHelpText(
      'after',
      `
The new job has a new id, linked to the original both ways (\`gantry status\` shows both). Every
stage that does not run again is reused: \`succeeded\` from the start, marked reused (from which job
and attempt), with the original's committed outputs, by reference (nothing is copied); no process
of it runs. The stages that run read their inputs (GANTRY_INPUT_DIR/<stage>) exactly as in any job.
The plan is printed first (on stderr; with --dry-run on stdout, and nothing else happens), then the
new job's id on stdout. docs/rerun.md has the details.

Refused, with nothing written (exit 2): a stage the job does not have; a stage to reuse that did not
succeed, or whose outputs are gone (released by the artifact store's size budget, or missing from
it): add it to --from; a job not ended (unless --cancel-running); in --spec, a change to a reused
stage, to the stages or their needs, or to the job's name or team (each named, with its field).

--json prints {dryRun, plan, job}; with --wait the final job; with --watch one JobView per change.
Exit codes: 0 submitted (or, when waiting, succeeded), 1 failed, 2 refused or invalid, 3 canceled,
4 no such job, 5 server unreachable, 130 stopped watching.

Examples:
  $ gantry rerun j_01HZX3 --dry-run
  $ gantry rerun j_01HZX3 --spec fixed.yaml --watch
  $ gantry rerun j_01HZX3 --from train --from evaluate
  $ gantry rerun j_01HZX3 --cancel-running --json | jq -r .job.id`,
    )
    .action(async (job, opts) => {
      await runAction((io) => runRerun(job, opts, io), { interruptible: Boolean(opts.wait || opts.watch) });
    });
}

/** A spec file as a plain value, or the reason it cannot be read, with line and column. */
async function readSpec(file: string): Promise<{ spec: unknown } | { problem: string }> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { problem: `cannot read ${file}: ${code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'is a directory' : errorText(e)}` };
  }
  const doc = parseDocument(text);
  const err = doc.errors[0];
  if (err) {
    const at = err.linePos?.[0];
    return { problem: `${file}${at ? `:${at.line}:${at.col}` : ''}: ${err.message.split('\n')[0]}` };
  }
  const spec: unknown = doc.toJS();
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) return { problem: `${file}: a job spec must be a mapping (name: ..., stages: ...)` };
  return { spec };
}

/** `gantry rerun`: returns the exit code (see exit-codes.ts) instead of exiting, for in-process use. */
export async function runRerun(jobId: string, opts: RerunOptions, io: CliIo): Promise<number> {
  const req: RerunRequest = {
    ...(opts.from?.length ? { from: opts.from } : {}),
    ...(opts.cancelRunning ? { cancelRunning: true } : {}),
    ...(opts.dryRun ? { dryRun: true } : {}),
  };
  if (opts.spec !== undefined) {
    const read = await readSpec(opts.spec);
    if ('problem' in read) {
      io.stderr.write(`gantry: ${read.problem}\n`);
      return ExitCode.usage;
    }
    req.spec = read.spec;
  }
  return reportingErrors(io, async () => {
    const client = clientFor(opts);
    const r: RerunResult = await client.rerun(jobId, req);
    const waiting = !opts.dryRun && Boolean(opts.wait || opts.watch);
    if (opts.json && !waiting) {
      io.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
      return ExitCode.ok;
    }
    if (!opts.json) {
      const stages = r.job?.stages.map((s) => s.name) ?? (await client.getJob(jobId)).stages.map((s) => s.name);
      const text = `${renderRerunPlan(r.plan, stages, { color: io.color })}\n`;
      if (opts.dryRun) {
        io.stdout.write(`${text}\ndry run: nothing was submitted\n`);
        return ExitCode.ok;
      }
      io.stderr.write(`${text}\n`);
      io.stdout.write(`${r.job!.id}\n`);
    }
    if (!waiting) return ExitCode.ok;
    return followJob(client, r.job!.id, opts, io);
  });
}

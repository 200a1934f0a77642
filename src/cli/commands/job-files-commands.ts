import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { CliIo } from '../render/cli-io.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export interface OutputsOptions extends ClientOptions {
  output?: string;
}

/** `gantry outputs JOB STAGE [PATH] [-o DIR]` and `gantry delete JOB`: a job's files, and its end. */
export function jobFilesCommands(program: CommandUnknownOpts): void {
  withClientOptions(
    program
      .command('outputs')
      .description("A stage's committed outputs: list them, print one, or download them")
      .argument('<job>', 'job id')
      .argument('<stage>', 'stage name')
      .argument('[path]', 'one output file (as listed)')
      .option('-o, --output <dir>', 'download into this directory (every output, or PATH), keeping their paths'),
  )
    .addHelpText(
      'after',
      `
Only the outputs a stage committed (its successful attempt's, or for a stage a rerun reused, the
original's) are there. Without PATH: the list (size, path and sha256); PATH alone: the file on
stdout; -o DIR: files written under DIR.
Exit codes: 0 done, 4 no such job, stage or output (or the stage has not succeeded), 5 server unreachable.

Examples:
  $ gantry outputs j_01HZX3 train
  $ gantry outputs j_01HZX3 train model.bin -o ./out
  $ gantry outputs j_01HZX3 evaluate report.txt | less`,
    )
    .action(async (...args: unknown[]) => {
      const [job, stage, path, opts] = args as [string, string, string | undefined, OutputsOptions];
      await runAction((io) => runOutputs(job, stage, path, opts, io));
    });
  withClientOptions(
    program
      .command('delete')
      .description('Delete an ended job: its stages, attempts, events, logs and outputs (less the outputs a rerun reuses)')
      .argument('<job>', 'job id'),
  )
    .addHelpText(
      'after',
      '\nOutputs another job refers to (a rerun reused them) are kept; the rest are deleted by the next artifact collection (within a minute; `gantry gc` now).\n' +
        "Exit codes: 0 deleted, 2 refused (the job has not ended: cancel it first), 4 no such job, 5 server unreachable.\n\nExample:\n  $ gantry list --state failed --json | jq -r '.jobs[].id' | xargs -n1 gantry delete",
    )
    .action(async (...args: unknown[]) => {
      const [job, opts] = args as [string, ClientOptions];
      await runAction((io) => runDelete(job, opts, io));
    });
}

export async function runOutputs(jobId: string, stage: string, path: string | undefined, opts: OutputsOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const client = clientFor(opts);
    const job = await client.getJob(jobId);
    const s = job.stages.find((x) => x.name === stage);
    if (!s) {
      io.stderr.write(`gantry: job ${jobId} has no stage ${stage} (its stages: ${job.stages.map((x) => x.name).join(', ')})\n`);
      return ExitCode.notFound;
    }
    // The stage's manifest: its own commit, or a reused stage's original files (docs/rerun.md).
    const committed = s.state === 'succeeded' ? (s.outputs ?? null) : null;
    if (committed === null) {
      const why =
        s.state !== 'succeeded'
          ? `is ${s.state}: only a succeeded stage has outputs`
          : 'has no outputs any more: they were released (the artifact store was over its size budget)';
      io.stderr.write(`gantry: stage ${stage} of job ${jobId} ${why}\n`);
      return ExitCode.notFound;
    }
    const files = path === undefined ? committed : committed.filter((f) => f.path === path);
    if (path !== undefined && files.length === 0) {
      io.stderr.write(
        `gantry: stage ${stage} has no output ${path}${committed.length ? ` (it has: ${committed.map((f) => f.path).join(', ')})` : ' (it committed none)'}\n`,
      );
      return ExitCode.notFound;
    }
    if (opts.output === undefined && path === undefined) {
      if (opts.json) io.stdout.write(`${JSON.stringify({ outputs: committed }, null, 2)}\n`);
      else if (committed.length === 0) io.stderr.write(`stage ${stage} committed no outputs\n`);
      else for (const f of committed) io.stdout.write(`${String(f.size).padStart(12)}  ${f.path}${f.sha256 ? `  sha256:${f.sha256}` : ''}\n`);
      return ExitCode.ok;
    }
    if (opts.output === undefined) {
      // Bytes as they are (process.stdout takes a Buffer; a test's buffer its text).
      (io.stdout.write as (chunk: string | Buffer) => unknown)(await client.output(jobId, stage, path!));
      return ExitCode.ok;
    }
    const root = resolve(opts.output);
    for (const f of files) {
      const target = resolve(join(root, f.path));
      // Paths come from the server, checked there; checked here too, as they become local files.
      if (!target.startsWith(root + sep)) throw new Error(`output path ${f.path} would leave ${root}`);
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(target, await client.output(jobId, stage, f.path));
      if (!opts.json) io.stderr.write(`${target}\n`);
    }
    if (opts.json) io.stdout.write(`${JSON.stringify({ written: files.map((f) => join(root, f.path)) }, null, 2)}\n`);
    return ExitCode.ok;
  });
}

export async function runDelete(jobId: string, opts: ClientOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const r = await clientFor(opts).deleteJob(jobId);
    if (opts.json) io.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
    else io.stdout.write(`deleted ${r.deleted} (${r.attempts} attempt${r.attempts === 1 ? '' : 's'}, their logs and outputs, less outputs a rerun reuses)\n`);
    return ExitCode.ok;
  });
}

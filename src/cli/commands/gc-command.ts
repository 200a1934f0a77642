import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { CollectionView } from '../../api/contract/artifacts-view.js';
import type { CliIo } from '../render/cli-io.js';
import { formatAge } from '../render/format-age.js';
import { formatBytes } from '../render/format-bytes.js';
import { palette } from '../render/palette.js';
import { plainTable } from '../render/plain-table.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export interface GcOptions extends ClientOptions {
  dryRun?: boolean;
}

export function gcCommand(program: CommandUnknownOpts): void {
  withClientOptions(
    program.command('gc').description("Collect the artifact store now: outputs no job refers to, and ended jobs' outputs past its size budget (admin)"),
  )
    .option('--dry-run', 'show what would go, and why; delete nothing')
    .addHelpText(
      'after',
      `
Stage outputs are kept by reference (docs/rerun.md): a file is deleted only when no job refers to it
any more (its jobs were deleted, by \`gantry delete\` or after GANTRY_RETENTION_HOURS). With a size
budget (GANTRY_ARTIFACTS_MAX_BYTES on the server, e.g. 500Gi), the outputs of ended jobs are
released, oldest ended first, until the store fits; never the outputs of a job still running, nor
outputs a rerun reuses. The server does this every GANTRY_ARTIFACTS_GC_SECONDS (60); this runs it
now, or with --dry-run shows what it would do. Run without --dry-run, it also reads the whole store
for files a server crash left behind (as the server does once after it starts, then daily).

Exit codes: 0 done (or shown), 5 server unreachable, 6 not an admin token.

Examples:
  $ gantry gc --dry-run
  $ gantry gc --json | jq .freedBytes`,
    )
    .action(async (opts) => {
      await runAction((io) => runGc(opts, io));
    });
}

/** What a collection did or would do, as text: the store before and after, then each blob and release. */
export function renderCollection(r: CollectionView, now: number, color?: boolean): string {
  const c = palette(color);
  const budget = r.budgetBytes === null ? 'no size budget' : `budget ${formatBytes(r.budgetBytes)}`;
  const lines = [`artifact store: ${formatBytes(r.totalBytes)} in ${r.blobs} file${r.blobs === 1 ? '' : 's'}, ${budget}`];
  const rows = [
    ...r.release.map((x) => [
      c.yellow('release'),
      formatBytes(x.bytes),
      `${x.jobId}/${x.stage}`,
      `${x.files} file${x.files === 1 ? '' : 's'} of a job ended ${formatAge(x.endedAt, now)} ago: over the budget`,
    ]),
    ...r.collect
      .filter((x) => x.why === 'unreferenced')
      .map((x) => [c.red('delete'), formatBytes(x.size), x.blob, `no job refers to it (since ${formatAge(x.unreferencedSince, now)} ago)`]),
  ];
  lines.push(
    rows.length
      ? `\n${plainTable(
          ['ACTION', 'SIZE', 'WHAT', 'WHY'].map((h) => c.bold(h)),
          rows,
        )}\n`
      : 'nothing to collect',
  );
  const freed = r.dryRun
    ? `would free ${formatBytes(r.totalBytes - r.bytesAfter)}`
    : `freed ${formatBytes(r.freedBytes)} (${r.deleted} deleted${r.kept ? `, ${r.kept} kept: written again meanwhile` : ''}${r.missing ? `, ${r.missing} already gone` : ''})`;
  lines.push(`${freed}; ${r.dryRun ? 'would leave' : 'left'} ${formatBytes(r.bytesAfter)}`);
  if (r.budgetBytes !== null && r.bytesAfter > r.budgetBytes)
    lines.push(c.red(`still over the budget: what is left belongs to jobs not ended, or is reused by reruns`));
  const s = r.strays;
  if (s && s.collected + s.restored + s.removedAside > 0) {
    lines.push(
      `left by a crash: ${s.collected} file${s.collected === 1 ? '' : 's'} no job refers to deleted, ${s.restored} put back, ${s.removedAside} set-aside cop${s.removedAside === 1 ? 'y' : 'ies'} removed`,
    );
  }
  if (r.more) lines.push('more to collect than one pass takes: run it again');
  if (r.dryRun) lines.push('dry run: nothing was deleted');
  return lines.join('\n');
}

export async function runGc(opts: GcOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const r = await clientFor(opts).collectArtifacts({ dryRun: opts.dryRun });
    io.stdout.write(opts.json ? `${JSON.stringify(r, null, 2)}\n` : `${renderCollection(r, (io.now ?? Date.now)(), io.color)}\n`);
    return ExitCode.ok;
  });
}

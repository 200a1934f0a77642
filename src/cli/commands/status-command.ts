import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { CliIo } from '../render/cli-io.js';
import { MAX_ATTEMPT_ROWS, renderAttemptTable } from '../render/attempt-table.js';
import { renderJobHeader } from '../render/job-header.js';
import { renderStageTable } from '../render/stage-table.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export function statusCommand(program: CommandUnknownOpts): void {
  withClientOptions(
    program
      .command('status')
      .description('Show a job and its stages: where each runs, its attempts (how each ended, what it used), and why it waits or ended')
      .argument('<job>', 'job id'),
  )
    .addHelpText(
      'after',
      `
ATTEMPT counts the attempts charged to the retry budget, of its maximum; lost and preempted ones
are not charged and show apart ("0/3 +1 preempted"). A stage waiting for a machine again (requeued)
shows no MACHINE or GPUS: those of its last attempt are in the attempts below.

Below the stages, every attempt: how it ended (exit code, signal, or a kind such as oom-killed,
timeout, lost), how long it ran, what it used where its agent measured it from its cgroup (its
memory's peak and CPU seconds, docs/containment.md), and the detail of its end in full. A job of
more than ${MAX_ATTEMPT_ROWS} attempts lists the ones that did not succeed; --json has them all.

Exit codes: 0 shown, 4 no such job, 5 server unreachable.

Examples:
  $ gantry status j_01HZX3
  $ gantry status j_01HZX3 --json | jq '.stages[] | {name, state, pendingReason}'`,
    )
    .action(async (job, opts) => {
      await runAction((io) => runStatus(job, opts, io));
    });
}

export async function runStatus(jobId: string, opts: ClientOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const job = await clientFor(opts).getJob(jobId);
    if (opts.json) {
      io.stdout.write(`${JSON.stringify(job, null, 2)}\n`);
      return ExitCode.ok;
    }
    const now = (io.now ?? Date.now)();
    const attempts = renderAttemptTable(job, now, { color: io.color });
    io.stdout.write(
      `${renderJobHeader(job, now, { color: io.color })}\n\n${renderStageTable(job, now, { color: io.color })}\n${attempts ? `\n${attempts}\n` : ''}`,
    );
    return ExitCode.ok;
  });
}

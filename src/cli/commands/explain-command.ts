import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { StageExplanation } from '../../api/contract/job-view.js';
import { isTerminalStageState } from '../../api/contract/states.js';
import type { CliIo } from '../render/cli-io.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export function explainCommand(program: CommandUnknownOpts): void {
  withClientOptions(
    program
      .command('explain')
      .description(
        'Why a stage is not running: the binding reason, how many machines each constraint leaves, its place in the queue, and what change would let it run',
      )
      .argument('<job>', 'job id')
      .argument('[stage]', 'one stage (default: every stage that has not ended)'),
  )
    .addHelpText(
      'after',
      `
On a server that autoscales (docs/autoscaling.md), a waiting stage also says what the
autoscaler does for it: a machine starting for it ("a machine of pool h100 (h100-3) is starting
for it, up to 600 s"), or why it starts none ("autoscaler: no template has a100 GPUs").

A gang stage (resources.machines, docs/gangs.md) says what set of machines it lacks ("needs 3
machines with 8 free h100 GPUs in one rack: 2 racks have 2"); its funnel counts machines for one
member, and, placed, the reason names every member's machine, rank 0 first.

Exit codes: 0 shown, 4 no such job or stage, 5 server unreachable.

Examples:
  $ gantry explain j_01HZX3 train
  $ gantry explain j_01HZX3 --json | jq '.[].reason'`,
    )
    .action(async (job, stage, opts) => {
      await runAction((io) => runExplain(job, stage, opts, io));
    });
}

export async function runExplain(jobId: string, stage: string | undefined, opts: ClientOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const client = clientFor(opts);
    const names = stage ? [stage] : (await client.getJob(jobId)).stages.filter((s) => !isTerminalStageState(s.state)).map((s) => s.name);
    const all = await Promise.all(names.map((n) => client.explainStage(jobId, n)));
    if (opts.json) io.stdout.write(`${JSON.stringify(stage ? all[0] : all, null, 2)}\n`);
    else if (all.length === 0) io.stdout.write(`job ${jobId}: every stage has ended (gantry status ${jobId})\n`);
    else io.stdout.write(all.map(renderExplanation).join('\n'));
    return ExitCode.ok;
  });
}

/** The explanation as a person reads it: the reason, the queue, then the funnel of machines. */
export function renderExplanation(e: StageExplanation): string {
  const lines = [`stage ${e.stage} (${e.state}, pool ${e.pool}): ${e.reason ?? 'a machine has room now: the next scheduler pass places it'}`];
  if (e.queue) lines.push(`  queue: ${e.queue.ahead} ahead of it, ${e.queue.waiting} waiting in all`);
  if (e.quota) lines.push(`  quota: ${e.quota} (preemptible stages may borrow beyond it; \`gantry team show\`)`);
  // A machine held for it is already the reason line; the autoscaler's reason for starting none is said beside the scheduler's.
  if (e.autoscale && e.autoscale.kind !== 'held') lines.push(`  autoscaler: ${e.autoscale.message} (\`gantry autoscale\`)`);
  // A gang's reason is the set of machines it lacks; the funnel below counts machines for one member.
  if (e.gang)
    lines.push(`  gang: ${e.gang.size} machines at once, one member each${e.gang.sameLabel ? `, all with one value of label ${e.gang.sameLabel}` : ''}`);
  if (e.funnel.length) {
    // The counts are what is left after each check and every one before it, not how many machines
    // pass that check alone: "0  with 1 CPU in all" read as if no machine had 1 CPU when the GPU
    // check before had dropped them all. Each line says what it counts, and where machines went.
    const whom = e.gang ? ' for one member' : '';
    lines.push(`  machines: ${e.registered} registered; left${whom} after each check, in the order the scheduler runs them:`);
    const width = `${e.registered} of ${e.registered} left`.length;
    let before = e.registered;
    for (const f of e.funnel) {
      const out = before - f.machines;
      const note = before === 0 ? ' (not checked: no machine left)' : out > 0 ? ` (${out} of ${before} ${before === 1 ? 'fails' : 'fail'} it)` : '';
      lines.push(`    ${`${f.machines} of ${e.registered} left`.padEnd(width)}  ${f.step}${note}`);
      before = f.machines;
    }
  }
  if (e.suggestions.length) {
    lines.push('  it could run now if it would:');
    for (const s of e.suggestions) lines.push(`    - ${s}`);
  }
  return lines.join('\n') + '\n';
}

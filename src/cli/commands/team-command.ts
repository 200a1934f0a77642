import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import Table from 'cli-table3';
import type { QuotaWire, TeamView } from '../../api/contract/team-view.js';
import type { CliIo } from '../render/cli-io.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';
import { errorText } from '../../lib/error-text.js';

export interface TeamSetOptions extends ClientOptions {
  weight?: string;
  quota?: string;
}

/** A `--quota` the CLI cannot read (the server judges the amounts themselves). */
export class QuotaSyntaxError extends Error {}

/**
 * `--quota cpu=64,memory=256Gi,gpu:h100=16,outputs=2Ti` as the API takes it ("none": no limits). The CLI
 * checks the form; the server parses the amounts, as it does for a job spec.
 */
export function quotaWireFrom(text: string): QuotaWire {
  if (text.trim() === 'none') return {};
  const q: QuotaWire = {};
  for (const part of text
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean)) {
    const eq = part.indexOf('=');
    const key = eq > 0 ? part.slice(0, eq).trim() : '';
    const value = eq > 0 ? part.slice(eq + 1).trim() : '';
    if (key === 'cpu' && value) q.cpu = value;
    else if (key === 'memory' && value) q.memory = value;
    else if (key === 'outputs' && value) q.outputs = value;
    // GPUs may be fractional (shares of a GPU, issue 29): at most 3 decimals, thousandths of a GPU.
    else if (key.startsWith('gpu:') && key.length > 4 && /^\d+(\.\d{1,3})?$/.test(value)) q.gpus = { ...q.gpus, [key.slice(4)]: Number(value) };
    else
      throw new QuotaSyntaxError(
        `--quota "${part}": write cpu=N, memory=Q, gpu:TYPE=N (GPUs, at most 3 decimals: gpu:t4=2.5) or outputs=Q, comma-separated (or none)`,
      );
  }
  return q;
}

/** `gantry team create|set|list|show` (docs/scheduling.md, "Teams, quotas and fair share"). */
export function teamCommand(program: CommandUnknownOpts): void {
  const group = program
    .command('team')
    .description('Teams: fair-share weights and quotas (create and set: admin)')
    .addHelpText(
      'after',
      `
Each job belongs to a team (its spec's "team", default "default"). Within a pool, stages go by
priority, then by their team's dominant share of the cluster over its weight (lower first), then
by age. A team's non-preemptible stages stay within its quota; preemptible ones may borrow idle
capacity beyond it, which is taken back (preempted) when a team within its quota needs it.`,
    );
  const withSet = (c: CommandUnknownOpts) =>
    c
      .option('--weight <w>', 'fair-share weight (default 1): a team of weight 2 is served as if it held half')
      .option(
        '--quota <list>',
        "cpu=N,memory=Q,gpu:TYPE=N,outputs=Q (any of them; none: no limits), e.g. cpu=64,memory=256Gi,gpu:h100=16; GPUs may be shares, at most 3 decimals (gpu:t4=2.5); outputs: the bytes its committed outputs may hold (default: the server's GANTRY_TEAM_OUTPUTS_MAX_BYTES)",
      );
  withClientOptions(withSet(group.command('create').description('Make a team').argument('<name>', 'team name')))
    .addHelpText(
      'after',
      '\nExit codes: 0 made, 2 refused (exists, or a bad quota), 5 server unreachable, 6 not an admin token.\n\nExample:\n  $ gantry team create vision --weight 2 --quota gpu:h100=16,cpu=128',
    )
    .action(async (...args: unknown[]) => {
      const [name, opts] = args as [string, TeamSetOptions];
      await runAction((io) => runTeamSet(name, opts, io, true));
    });
  withClientOptions(withSet(group.command('set').description("Change a team's weight or quota (a quota replaces the old one)").argument('<name>', 'team name')))
    .addHelpText(
      'after',
      '\nExit codes: 0 changed, 2 refused, 4 no such team, 5 server unreachable, 6 not an admin token.\n\nExample:\n  $ gantry team set vision --quota gpu:h100=8',
    )
    .action(async (...args: unknown[]) => {
      const [name, opts] = args as [string, TeamSetOptions];
      await runAction((io) => runTeamSet(name, opts, io, false));
    });
  withClientOptions(group.command('list').description('Teams with their weights, quotas, usage and shares'))
    .addHelpText('after', '\nBORROWING: yes when the team holds more than its quota (preemptible work on idle capacity, which\nother teams may reclaim).')
    .action(async (opts) => {
      await runAction((io) => runTeamList(opts, io));
    });
  withClientOptions(group.command('show').description('One team').argument('<name>', 'team name')).action(async (name, opts) => {
    await runAction((io) => runTeamShow(name, opts, io));
  });
}

export async function runTeamSet(name: string, opts: TeamSetOptions, io: CliIo, create: boolean): Promise<number> {
  return reportingErrors(io, async () => {
    const weight = opts.weight === undefined ? undefined : Number(opts.weight);
    if (weight !== undefined && !(weight > 0 && weight <= 1000)) {
      io.stderr.write(`gantry: --weight ${opts.weight}: a number above 0, at most 1000\n`);
      return ExitCode.usage;
    }
    let quota: QuotaWire | undefined;
    try {
      quota = opts.quota === undefined ? undefined : quotaWireFrom(opts.quota);
    } catch (err) {
      io.stderr.write(`gantry: ${errorText(err)}\n`);
      return ExitCode.usage;
    }
    const body = { ...(weight !== undefined ? { weight } : {}), ...(quota !== undefined ? { quota } : {}) };
    const client = clientFor(opts);
    const t = create ? await client.createTeam({ name, ...body }) : await client.changeTeam(name, body);
    if (opts.json) io.stdout.write(`${JSON.stringify(t, null, 2)}\n`);
    else io.stdout.write(`team ${t.name} ${create ? 'created' : 'set'}: weight ${t.weight}, quota ${t.quotaText}\n`);
    return ExitCode.ok;
  });
}

function usageText(t: TeamView): string {
  const parts: string[] = [];
  if (t.usage.cpu) parts.push(`cpu=${t.usage.cpu}`);
  if (t.usage.memory) parts.push(`memory=${t.usage.memory}`);
  for (const [k, n] of Object.entries(t.usage.gpus)) if (n > 0) parts.push(`gpu:${k}=${n}`);
  return parts.join(',') || '-';
}

export async function runTeamList(opts: ClientOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const teams = await clientFor(opts).teams();
    if (opts.json) {
      io.stdout.write(`${JSON.stringify({ teams }, null, 2)}\n`);
      return ExitCode.ok;
    }
    // BORROWING: holds more than its quota (preemptible work on idle capacity, reclaimable).
    const table = new Table({ head: ['TEAM', 'WEIGHT', 'QUOTA', 'HOLDS', 'SHARE', 'BORROWING'], style: { head: [], border: [] } });
    for (const t of teams) table.push([t.name, String(t.weight), t.quotaText, usageText(t), `${(t.share * 100).toFixed(1)}%`, t.borrowing ? 'yes' : 'no']);
    io.stdout.write(`${table.toString()}\n`);
    return ExitCode.ok;
  });
}

export async function runTeamShow(name: string, opts: ClientOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const t = await clientFor(opts).team(name);
    if (opts.json) io.stdout.write(`${JSON.stringify(t, null, 2)}\n`);
    else
      io.stdout.write(
        `team ${t.name}\n  weight  ${t.weight}\n  quota   ${t.quotaText}\n  holds   ${usageText(t)}${t.borrowing ? ' (borrowing beyond its quota: preemptible work, reclaimable)' : ''}\n  share   ${(t.share * 100).toFixed(1)}% of the cluster over its weight\n`,
      );
    return ExitCode.ok;
  });
}

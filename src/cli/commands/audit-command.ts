import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { AuditView } from '../../api/contract/audit-view.js';
import type { CliIo } from '../render/cli-io.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { positiveInt } from './positive-int.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export interface AuditOptions extends ClientOptions {
  since?: string;
  limit?: number;
}

/** `gantry audit`: every change a person asked for, oldest first (admin). */
export function auditCommand(program: CommandUnknownOpts): void {
  withClientOptions(
    program
      .command('audit')
      .description('The audit log: who changed what, when, and how it went (admin)')
      .option('--since <time>', 'from this time on: an ISO time, or a duration back from now (30m, 12h, 7d)')
      .option('--limit <n>', 'at most this many rows, the oldest first (default 1000)', positiveInt),
  )
    .addHelpText(
      'after',
      `
Each row: when, who (the token, its kind and team), the action (job.submit, job.cancel,
machine.cordon, token.create, …), its target, and its result: "ok" (the change was made, its row
written with it) or "refused: <status> <why>"; the same refusal repeated within a minute is one row,
"(N times, last TIME)". Rows older than the server's GANTRY_AUDIT_RETENTION_DAYS (default 90) are
deleted. Agents' heartbeats and reports are not here: they
are the jobs' events (gantry status).
Exit codes: 0 shown, 2 bad --since, 5 server unreachable, 6 not an admin token.

Examples:
  $ gantry audit --since 1d
  $ gantry audit --json | jq '.entries[] | select(.result | startswith("refused"))'`,
    )
    .action(async (opts) => {
      await runAction((io) => runAudit(opts, io));
    });
}

export async function runAudit(opts: AuditOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const since = opts.since === undefined ? undefined : sinceTime(opts.since, (io.now ?? Date.now)());
    if (since === null) {
      io.stderr.write(`gantry: --since ${opts.since}: an ISO time (2026-12-01T10:00Z) or a duration back from now (30m, 12h, 7d)\n`);
      return ExitCode.usage;
    }
    const entries = await clientFor(opts).audit({ ...(since ? { since } : {}), ...(opts.limit ? { limit: opts.limit } : {}) });
    if (opts.json) {
      io.stdout.write(`${JSON.stringify({ entries }, null, 2)}\n`);
      return ExitCode.ok;
    }
    if (entries.length === 0) io.stdout.write('no entries\n');
    for (const e of entries) io.stdout.write(`${line(e)}\n`);
    return ExitCode.ok;
  });
}

function line(e: AuditView): string {
  // A refusal repeated within a minute is one row: how many times, and until when.
  const times = e.count > 1 ? `  (${e.count} times, last ${e.lastAt.slice(0, 19).replace('T', ' ')})` : '';
  return `${e.at.slice(0, 19).replace('T', ' ')}  ${e.action.padEnd(18)} ${(e.target ?? '-').padEnd(26)} ${e.result}${times}  by ${e.actor}`;
}

/** An ISO time, or a duration back from `now`; null when it is neither. */
export function sinceTime(text: string, now: number): string | null {
  const d = /^(\d+)(s|m|h|d)$/.exec(text.trim());
  if (d) return new Date(now - Number(d[1]) * { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[d[2] as 's' | 'm' | 'h' | 'd']).toISOString();
  const t = Date.parse(text);
  return Number.isNaN(t) ? null : new Date(t).toISOString();
}

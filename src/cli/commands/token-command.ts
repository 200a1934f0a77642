import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import Table from 'cli-table3';
import type { TokenView } from '../../api/contract/token-view.js';
import type { CliIo } from '../render/cli-io.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export interface TokenCreateOptions extends ClientOptions {
  kind: string;
  team?: string;
  name: string;
  expiresDays?: string;
}

const KINDS = ['team', 'admin', 'join'];

/** `gantry token create|list|revoke`: an admin's (docs/security.md). */
export function tokenCommand(program: CommandUnknownOpts): void {
  const group = program
    .command('token')
    .description('Who may do what: make, list and revoke API tokens (admin)')
    .addHelpText(
      'after',
      `
Kinds: team (one team's jobs: submit, see, cancel, logs; reads the cluster), admin (everything),
join (lets an agent join: \`gantry agent --token-file\`; the machine then gets its own credential).
Only a hash of each token is kept: the token is printed once, when it is made.`,
    );
  withClientOptions(
    group
      .command('create')
      .description('Make a token; prints it once')
      .option('--kind <kind>', `team, admin or join`, 'team')
      .option('--team <team>', 'the team of a team token')
      .requiredOption('--name <name>', 'what it is for (who holds it), for the list')
      .option('--expires-days <n>', 'expires after this many days (default: never)'),
  )
    .addHelpText(
      'after',
      `
Exit codes: 0 made, 2 refused (the message says why), 5 server unreachable, 6 not allowed (not an admin token).

Examples:
  $ gantry token create --team ml --name "ml team CI"
  $ GANTRY_TOKEN=$(gantry token create --team ml --name alice --json | jq -r .token) gantry list
  $ gantry token create --kind join --name "gpu nodes" --expires-days 1`,
    )
    .action(async (opts) => {
      await runAction((io) => runTokenCreate(opts, io));
    });
  withClientOptions(
    group
      .command('list')
      .description('Tokens (never the tokens themselves)')
      .option('--all', "revoked ones too (kept 30 days after they ended: the server's GANTRY_TOKEN_RETENTION_DAYS)"),
  ).action(async (opts) => {
    await runAction((io) => runTokenList(opts, io));
  });
  withClientOptions(group.command('revoke').description('Revoke a token: refused from its next request on').argument('<id>', 'token id (tok_…)')).action(
    async (id, opts) => {
      await runAction((io) => runTokenRevoke(id, opts, io));
    },
  );
}

export async function runTokenCreate(opts: TokenCreateOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    if (!KINDS.includes(opts.kind)) {
      io.stderr.write(`gantry: --kind ${opts.kind}: one of ${KINDS.join(', ')}\n`);
      return ExitCode.usage;
    }
    const days = opts.expiresDays === undefined ? undefined : Number(opts.expiresDays);
    if (days !== undefined && !(days > 0)) {
      io.stderr.write(`gantry: --expires-days ${opts.expiresDays}: a number of days above 0\n`);
      return ExitCode.usage;
    }
    const r = await clientFor(opts).createToken({
      kind: opts.kind as 'team' | 'admin' | 'join',
      name: opts.name,
      ...(opts.team !== undefined ? { team: opts.team } : {}),
      ...(days !== undefined ? { expiresInDays: days } : {}),
    });
    if (opts.json) io.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
    else {
      io.stdout.write(`${r.token}\n`);
      io.stderr.write(`${describe(r.info)}; shown this once: keep it somewhere safe\n`);
    }
    return ExitCode.ok;
  });
}

export async function runTokenList(opts: ClientOptions & { all?: boolean }, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const tokens = await clientFor(opts).tokens({ all: opts.all === true });
    if (opts.json) {
      io.stdout.write(`${JSON.stringify({ tokens }, null, 2)}\n`);
      return ExitCode.ok;
    }
    const table = new Table({ head: ['ID', 'KIND', 'TEAM', 'NAME', 'CREATED', 'EXPIRES', 'REVOKED'], style: { head: [], border: [] } });
    for (const t of tokens)
      table.push([t.id, t.kind, t.team ?? '-', t.name, day(t.createdAt), t.expiresAt ? day(t.expiresAt) : '-', t.revokedAt ? day(t.revokedAt) : '-']);
    io.stdout.write(`${table.toString()}\n`);
    return ExitCode.ok;
  });
}

export async function runTokenRevoke(id: string, opts: ClientOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const r = await clientFor(opts).revokeToken(id);
    if (opts.json) io.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
    else io.stdout.write(r.changed ? `revoked ${describe(r.token)}\n` : `${describe(r.token)} was already revoked\n`);
    return ExitCode.ok;
  });
}

function describe(t: TokenView): string {
  return `${t.kind} token ${t.id} (${t.name}${t.team ? `, team ${t.team}` : ''}${t.machineId ? `, machine ${t.machineId}` : ''})`;
}

const day = (iso: string) => iso.slice(0, 16).replace('T', ' ');

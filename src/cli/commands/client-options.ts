import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command, OptionValues } from '@commander-js/extra-typings';
import { insecureTransportProblem } from '../../api/contract/transport.js';
import { GantryClient } from '../client/gantry-client.js';
import { errorText } from '../../lib/error-text.js';
import { serverList } from '../../lib/server-list.js';

export const DEFAULT_SERVER = 'http://127.0.0.1:7070';
export const DEFAULT_DATA_DIR = './.gantry';

/** The options every client command takes. */
export interface ClientOptions {
  server: string;
  token?: string;
  /** A file with the PEM of the CA that signed the server's certificate (else $GANTRY_CA). */
  ca?: string;
  json?: boolean;
}

/** Adds `--server`, `--token` and `--json`; the default server comes from GANTRY_SERVER when set. */
export function withClientOptions<A extends unknown[], O extends OptionValues, G extends OptionValues>(cmd: Command<A, O, G>) {
  return cmd
    .option(
      '--server <url[,url…]>',
      'Gantry server URL, or several replicas comma-separated (the next is tried when one cannot be reached); $GANTRY_SERVER sets the default',
      process.env.GANTRY_SERVER ?? DEFAULT_SERVER,
    )
    .option('--token <token>', 'API token; default $GANTRY_TOKEN, else the admin.token file in $GANTRY_DATA_DIR (./.gantry)')
    .option('--ca <file>', "the CA that signed the server's certificate, for a private one (PEM); default $GANTRY_CA")
    .option('--json', 'print machine-readable JSON instead of text');
}

/** A client command's transport was refused before anything was sent (a token in clear). */
export class InsecureTransportError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InsecureTransportError';
  }
}

/**
 * The token a client command sends: `--token`, else $GANTRY_TOKEN, else the admin token that
 * `gantry up` / `gantry server` wrote into the data directory ($GANTRY_DATA_DIR, default
 * ./.gantry). Null when there is none: the server's 401 then says how to get one.
 */
export function resolveToken(opts: { token?: string }, env: Readonly<Record<string, string | undefined>> = process.env): string | null {
  if (opts.token) return opts.token;
  if (env.GANTRY_TOKEN) return env.GANTRY_TOKEN;
  const file = join(env.GANTRY_DATA_DIR || DEFAULT_DATA_DIR, 'admin.token');
  if (!existsSync(file)) return null;
  return readFileSync(file, 'utf8').trim() || null;
}

/** The client for a command: its token resolved, and refused before sending one in clear to another host. */
export function clientFor(opts: ClientOptions, env: Readonly<Record<string, string | undefined>> = process.env): GantryClient {
  for (const url of serverList(opts.server)) {
    const problem = insecureTransportProblem(url, env);
    if (problem) throw new InsecureTransportError(problem);
  }
  const caFile = opts.ca ?? env.GANTRY_CA;
  let ca: string | undefined;
  if (caFile) {
    try {
      ca = readFileSync(caFile, 'utf8');
    } catch (err) {
      throw new InsecureTransportError(`--ca ${caFile}: ${errorText(err)}`);
    }
  }
  return new GantryClient(opts.server, { token: resolveToken(opts, env), ...(ca ? { ca } : {}) });
}

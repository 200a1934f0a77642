import { resolve } from 'node:path';

/** Where a client command looks when told nothing (the CLI's --server default and its data directory). */
const CLIENT_DEFAULT_URL = 'http://127.0.0.1:7070';
const CLIENT_DEFAULT_DATA_DIR = './.gantry';

/** A word as a POSIX shell reads it back: quoted only when it must be. */
const shellWord = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`);

/**
 * The "Try:" line `gantry up` ends its banner with: a command that works when pasted into another
 * shell of the same directory. The CLI finds the server at 127.0.0.1:7070 and its admin token in
 * ./.gantry unless told otherwise, so a `gantry up --port P --data-dir D` must say what to tell it
 * (GANTRY_SERVER, GANTRY_DATA_DIR, GANTRY_CA: what `--server`, the token file and `--ca` default
 * to), or the command as printed talks to another server, or to none, and waits.
 */
export function tryHint(p: { url: string; dataDir: string; ca?: string; cwd: string; env: Readonly<Record<string, string | undefined>> }): string[] {
  const vars: ['GANTRY_SERVER' | 'GANTRY_DATA_DIR' | 'GANTRY_CA', string][] = [];
  const server = p.env.GANTRY_SERVER ?? CLIENT_DEFAULT_URL;
  if (server !== p.url) vars.push(['GANTRY_SERVER', p.url]);
  const dataDir = resolve(p.cwd, p.dataDir);
  if (resolve(p.cwd, p.env.GANTRY_DATA_DIR || CLIENT_DEFAULT_DATA_DIR) !== dataDir) vars.push(['GANTRY_DATA_DIR', dataDir]);
  if (p.ca !== undefined && (p.env.GANTRY_CA === undefined || resolve(p.cwd, p.env.GANTRY_CA) !== resolve(p.cwd, p.ca)))
    vars.push(['GANTRY_CA', resolve(p.cwd, p.ca)]);
  const command = 'npx gantry submit examples/pipeline.yaml --watch    (Ctrl-C stops everything)';
  if (vars.length === 0) return [`Try: ${command}`];
  const finds = { GANTRY_SERVER: 'this server', GANTRY_DATA_DIR: 'its admin token', GANTRY_CA: "its certificate's CA" } as const;
  return [
    `Try: ${vars.map(([k, v]) => `${k}=${shellWord(v)}`).join(' ')} ${command}`,
    `     (or export ${vars.map(([k]) => k).join(' ')} in that shell once: with ${vars.length === 1 ? 'it' : 'them'} every gantry command finds ${vars.map(([k]) => finds[k]).join(', ')})`,
  ];
}

import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll } from 'vitest';

export const REPO = resolve(import.meta.dirname, '../..');
export const CLI = join(REPO, 'dist/cli/main.js');

/**
 * The admin token of each server a test started, by its URL: `api` and `gantry` send it, as a user
 * who ran `gantry up` would have it (from the data directory).
 */
const tokens = new Map<string, string>();

/** Reads the admin token a server wrote into its data directory, and sends it to that URL from now on. */
export function useServerToken(url: string, dataDir: string): string {
  const token = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
  tokens.set(url, token);
  return token;
}

export interface RunningGantry {
  url: string;
  dataDir: string;
  /** The admin token `gantry up` wrote into the data directory. */
  token: string;
  proc: ChildProcess;
  output: () => string;
  stop(): Promise<void>;
}

/**
 * Starts the built `gantry up` as a child process on a free port and a temporary data
 * directory — exactly what a user runs — and resolves once it prints its URL.
 */
export async function startGantryUp(opts: { cluster?: string; env?: Record<string, string>; dataDir?: string; umask?: string } = {}): Promise<RunningGantry> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'gantry-e2e-'));
  const args = [CLI, 'up', '--data-dir', dataDir, '--port', '0'];
  if (opts.cluster) {
    const file = join(dataDir, 'cluster.yaml');
    writeFileSync(file, opts.cluster);
    args.push('--cluster', file);
  }
  // `umask`: started as a shell with that umask would start it (exec: the same process, signals and all).
  const [file, argv] = opts.umask ? ['/bin/sh', ['-c', `umask ${opts.umask} && exec "$0" "$@"`, process.execPath, ...args]] : [process.execPath, args];
  const proc = spawn(file, argv, { cwd: REPO, env: { ...process.env, ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (out += d));
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`gantry up did not start in 20 s:\n${out}`)), 20_000);
    const check = () => {
      const m = /Gantry is up at (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    };
    proc.stdout.on('data', check);
    proc.on('exit', (code) => rej(new Error(`gantry up exited with ${code}:\n${out}`)));
  });
  return {
    url,
    dataDir,
    token: useServerToken(url, dataDir),
    proc,
    output: () => out,
    async stop() {
      if (proc.exitCode !== null) return;
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      if (proc.exitCode === null) proc.kill('SIGKILL');
    },
  };
}

/** Runs the built CLI and resolves with its exit code and output. */
export function gantry(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    // NO_COLOR: picocolors colours output whenever CI is set, as it is when CI runs the suite.
    // The admin token of the server named by --server, as a user's CLI finds it in the data directory.
    const server = args[args.indexOf('--server') + 1];
    const token = args.includes('--server') && server ? tokens.get(server) : undefined;
    const env = { ...process.env, NO_COLOR: '1', ...(token ? { GANTRY_TOKEN: token } : {}) };
    const proc = spawn(process.execPath, [CLI, ...args], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => (stdout += d));
    proc.stderr.on('data', (d) => (stderr += d));
    proc.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export async function api<T = any>(url: string, path: string, init?: RequestInit): Promise<{ status: number; body: T }> {
  const token = tokens.get(url);
  const headers = new Headers(init?.headers);
  if (token && !headers.has('authorization')) headers.set('authorization', `Bearer ${token}`);
  const res = await fetch(url + path, { ...init, headers });
  const text = await res.text();
  let body: any = text;
  try {
    body = JSON.parse(text);
  } catch {
    // plain text (logs)
  }
  return { status: res.status, body };
}

export async function submit(url: string, spec: unknown) {
  return api(url, '/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(spec) });
}

/** Polls until `pred` holds; the deadline is generous because CI machines are shared and slow. */
export async function until<T>(what: string, fn: () => Promise<T>, pred: (v: T) => boolean, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    last = await fn();
    if (pred(last)) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}; last value: ${JSON.stringify(last)?.slice(0, 2000)}`);
}

export const jobOf = (url: string, id: string) => api(url, `/v1/jobs/${id}`).then((r) => r.body);
export const isTerminal = <T extends { state: string }>(j: T): boolean => ['succeeded', 'failed', 'canceled'].includes(j.state);

export function processGroupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * `gantry up` for a describe block: started before its tests with this cluster, once `machines`
 * machines have joined, and stopped after them. Returns a getter for the running instance.
 */
export function gantryUpForSuite(opts: { cluster: string; machines: number; env?: Record<string, string>; umask?: string }): () => RunningGantry {
  let g: RunningGantry | undefined;
  beforeAll(async () => {
    g = await startGantryUp({ cluster: opts.cluster, ...(opts.env ? { env: opts.env } : {}), ...(opts.umask ? { umask: opts.umask } : {}) });
    await until(
      `${opts.machines} machines`,
      () => api(g!.url, '/v1/machines'),
      (r) => r.body.machines?.length === opts.machines,
    );
  });
  afterAll(async () => {
    await g?.stop();
  });
  return () => g!;
}

/**
 * A directory the test and its stages share: stages run as uids of their own (docs/containment.md),
 * so, as a user of a contained cluster would, the test makes it writable by all, sticky, as /tmp is.
 */
export function sharedDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(dir, 0o1777);
  return dir;
}

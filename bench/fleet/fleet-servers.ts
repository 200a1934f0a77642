import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dropPostgresSchema } from '../../src/store/postgres/open-postgres-store.js';
import { CLI, REPO } from '../../test/support/gantry-process.js';
import { freshSchema, NATS_URL, POSTGRES_URL } from '../../test/support/services.js';

export type FleetStore = 'sqlite' | 'postgres';

export interface FleetServers {
  store: FleetStore;
  urls: string[];
  procs: ChildProcess[];
  /** The first replica's admin token (one database: good on every replica). */
  admin: string;
  /** A join token for the fleet (made through the first replica). */
  joinToken: string;
  output(i: number): string;
  stop(): Promise<void>;
}

/**
 * Starts the built `gantry server` (dist/cli/main.js) for a fleet: one on SQLite, or `replicas`
 * on one PostgreSQL schema of their own (and NATS between them when there are two or more, as
 * docs/replicas.md runs them), each on a port of its own; the first is started (and leads) before
 * the others. `env` adds settings (timings, rate limits); `nodeFlags` go to each server's Node
 * (`--cpu-prof` …).
 */
export async function startFleetServers(o: { store: FleetStore; replicas: number; env?: Record<string, string>; nodeFlags?: string[] }): Promise<FleetServers> {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-fleet-'));
  const schema = freshSchema('fleet');
  const shared: Record<string, string> =
    o.store === 'postgres'
      ? {
          GANTRY_DATABASE_URL: POSTGRES_URL,
          GANTRY_DATABASE_SCHEMA: schema,
          GANTRY_ARTIFACTS_DIR: join(dir, 'artifacts'),
          ...(o.replicas > 1 ? { GANTRY_BUS_URL: NATS_URL } : {}),
        }
      : {};
  if (o.store === 'sqlite' && o.replicas !== 1) throw new Error('replicas need PostgreSQL: one server on SQLite');
  const procs: ChildProcess[] = [];
  const outs: string[] = [];
  const urls: string[] = [];
  const stop = async () => {
    await Promise.all(
      procs.map(
        (p) =>
          new Promise<void>((resolve) => {
            if (p.exitCode !== null || p.signalCode !== null) return resolve();
            const hard = setTimeout(() => p.kill('SIGKILL'), 15_000);
            p.once('exit', () => (clearTimeout(hard), resolve()));
            p.kill('SIGTERM');
          }),
      ),
    );
    // GANTRY_BENCH_KEEP_SCHEMA=1: the schema left for reading afterwards (its name on stderr); drop it by hand.
    if (o.store === 'postgres' && process.env.GANTRY_BENCH_KEEP_SCHEMA) console.error(`fleet: schema ${schema} kept`);
    else if (o.store === 'postgres') await dropPostgresSchema(POSTGRES_URL, schema).catch(() => {});
    // On SQLite the same variable keeps the servers' data directory (its database), for the split.
    if (o.store !== 'postgres' && process.env.GANTRY_BENCH_KEEP_SCHEMA) console.error(`fleet: data directory ${dir} kept`);
    else rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < o.replicas; i++) {
      const name = `r${i + 1}`;
      const proc = spawn(process.execPath, [...(o.nodeFlags ?? []), CLI, 'server', '--data-dir', join(dir, name), '--port', '0', '--json'], {
        cwd: REPO,
        env: { ...process.env, ...shared, ...o.env, GANTRY_REPLICA_ID: name },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      procs.push(proc);
      outs.push('');
      proc.stdout.on('data', (d) => (outs[i] += String(d)));
      proc.stderr.on('data', (d) => (outs[i] += String(d)));
      let url: string | undefined;
      for (let t = 0; t < 1200 && !url; t++) {
        if (proc.exitCode !== null) throw new Error(`server ${name} exited (${proc.exitCode}):\n${outs[i]!.slice(-3000)}`);
        url = /"url":"([^"]+)"/.exec(outs[i]!)?.[1];
        if (!url) await new Promise((r) => setTimeout(r, 50));
      }
      if (!url) throw new Error(`server ${name} did not start in 60 s:\n${outs[i]!.slice(-3000)}`);
      urls.push(url);
    }
    const admin = readFileSync(join(dir, 'r1', 'admin.token'), 'utf8').trim();
    const res = await fetch(`${urls[0]}/v1/tokens`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${admin}` },
      body: JSON.stringify({ kind: 'join', name: 'fleet' }),
    });
    if (res.status !== 201) throw new Error(`join token: ${res.status} ${await res.text()}`);
    const joinToken = ((await res.json()) as { token: string }).token;
    return { store: o.store, urls, procs, admin, joinToken, output: (i) => outs[i] ?? '', stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** POST JSON as an admin (a submission, a batch); throws naming the status on anything but 2xx. */
export async function adminPost<T>(url: string, path: string, admin: string, body: unknown): Promise<T> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${admin}` },
    body: JSON.stringify(body),
  });
  if (res.status >= 300) throw new Error(`POST ${path}: ${res.status} ${(await res.text()).slice(0, 300)}`);
  return (await res.json()) as T;
}

/** GET JSON as an admin; throws naming the status on anything but 2xx. */
export async function adminGet<T>(url: string, path: string, admin: string): Promise<T> {
  const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${admin}` } });
  if (res.status >= 300) throw new Error(`GET ${path}: ${res.status} ${(await res.text()).slice(0, 300)}`);
  return (await res.json()) as T;
}

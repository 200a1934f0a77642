/**
 * Leader failover between control-plane replicas (docs/replicas.md): two `gantry server`
 * replicas on the local PostgreSQL and NATS; the leader is SIGKILLed, and the time until the other
 * says it leads (GET /healthz, polled every 20 ms) is measured; the killed one is started again
 * as a follower, and the next trial kills whichever leads. Default lease: 5 s (the documented
 * bound is lease + a third of it).
 *
 * Usage: npm run bench:leader-failover [-- --trials 10 --ttl-ms 5000 --out FILE (default bench/results/leader-failover.md; '' only prints)]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { dropPostgresSchema } from '../src/store/postgres/open-postgres-store.js';
import { NATS_URL, POSTGRES_URL } from '../test/support/services.js';
import { CLI, REPO } from '../test/support/gantry-process.js';
import { percentile } from './peers/chain-workload.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? def) : def;
};
const TRIALS = Number(arg('trials', '10'));
const TTL_MS = Number(arg('ttl-ms', '5000'));
const OUT = arg('out', 'bench/results/leader-failover.md');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const dir = mkdtempSync(join(tmpdir(), 'gantry-leader-bench-'));
const schema = `leader_bench_${process.pid}`;
const env = {
  ...process.env,
  GANTRY_DATABASE_URL: POSTGRES_URL,
  GANTRY_DATABASE_SCHEMA: schema,
  GANTRY_BUS_URL: NATS_URL,
  GANTRY_LEADER_TTL_MS: String(TTL_MS),
};

interface Replica {
  name: string;
  port: number;
  proc: ChildProcess;
}

async function health(port: number): Promise<{ leader: boolean } | null> {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(500) });
    return (await r.json()) as { leader: boolean };
  } catch {
    return null;
  }
}

async function startReplica(name: string, port: number): Promise<Replica> {
  const proc = spawn(process.execPath, [CLI, 'server', '--data-dir', join(dir, name), '--port', String(port)], {
    cwd: REPO,
    env: { ...env, GANTRY_REPLICA_ID: name },
    stdio: 'ignore',
  });
  for (let i = 0; i < 400 && !(await health(port)); i++) await sleep(50);
  return { name, port, proc };
}

async function main() {
  const replicas = [await startReplica('r1', 17_801), await startReplica('r2', 17_802)];
  const times: number[] = [];
  try {
    for (let t = 0; t < TRIALS; t++) {
      let leader: Replica | undefined;
      while (!leader) {
        for (const r of replicas) if ((await health(r.port))?.leader) leader = r;
        if (!leader) await sleep(20);
      }
      const other = replicas.find((r) => r !== leader)!;
      const killedAt = performance.now();
      leader.proc.kill('SIGKILL');
      while (!(await health(other.port))?.leader) await sleep(20);
      const ms = performance.now() - killedAt;
      times.push(ms);
      console.error(`trial ${t + 1}: ${leader.name} killed, ${other.name} leads after ${Math.round(ms)} ms`);
      await new Promise((r) => (leader.proc.exitCode !== null || leader.proc.signalCode !== null ? r(null) : leader.proc.once('exit', r)));
      replicas[replicas.indexOf(leader)] = await startReplica(leader.name, leader.port);
      // A random point of the leader's renewal cycle for the next kill.
      await sleep(Math.random() * (TTL_MS / 3));
    }
  } finally {
    for (const r of replicas) r.proc.kill('SIGKILL');
    await dropPostgresSchema(POSTGRES_URL, schema);
    rmSync(dir, { recursive: true, force: true });
  }
  const bound = TTL_MS + TTL_MS / 3;
  const lines = [
    `# leader failover, ${new Date().toISOString().slice(0, 10)}`,
    '',
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, Node ${process.version}. Two replicas on the local PostgreSQL and NATS; lease ${TTL_MS} ms (bound ${Math.round(bound)} ms); the leader SIGKILLed ${TRIALS} times.`,
    '',
    '| trials | median | worst | best | bound |',
    '| --- | --- | --- | --- | --- |',
    `| ${times.length} | ${Math.round(percentile(times, 50))} ms | ${Math.round(Math.max(...times))} ms | ${Math.round(Math.min(...times))} ms | ${Math.round(bound)} ms |`,
  ];
  console.log(lines.join('\n'));
  if (OUT) writeFileSync(resolve(REPO, OUT), lines.join('\n') + '\n');
}

await main();

import SQLite from 'better-sqlite3';
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { api, gantry, isTerminal, jobOf, type RunningGantry, startGantryUp, submit, until } from '../support/gantry-process.js';

/**
 * The autoscaler end to end (issue 30, docs/autoscaling.md "The proof"): `gantry up` with pools in
 * its cluster file, real agents started and stopped by the local provider, a command provider
 * that is a script recording what it was asked. The state is read where it is kept, the database
 * (read-only), beside the API; the autoscaler decides every 300 ms here.
 */
const ENV = { GANTRY_AUTOSCALE_INTERVAL_MS: '300', GANTRY_KILL_GRACE_MS: '1000' };

interface Row {
  name: string;
  pool: string;
  lifecycle: string;
  requested_at: number | null;
  joined_at: number | null;
  released_at: number | null;
  stopped_at: number | null;
  fail_reason: string | null;
}

/** What the database says: the autoscaled machines, and the autoscaler's events. */
function readDb<T>(g: RunningGantry, read: (db: SQLite.Database) => T): T {
  const db = new SQLite(join(g.dataDir, 'gantry.db'), { readonly: true });
  try {
    return read(db);
  } finally {
    db.close();
  }
}
const rowsOf = (g: RunningGantry) => readDb(g, (db) => db.prepare('select * from autoscaled_machines order by started_at, name').all() as Row[]);
const eventsOf = (g: RunningGantry, type: string) =>
  readDb(g, (db) => db.prepare('select type, message, data from events where type = ? order by seq').all(type) as { message: string; data: string }[]);
/** The autoscaler's latest word on a one-stage job's stage (the wire's stage view carries no stage id). */
const waitOf = (g: RunningGantry, jobId: string) =>
  readDb(
    g,
    (db) =>
      db.prepare('select w.kind, w.reason from autoscale_waits w join stages s on s.id = w.stage_id where s.job_id = ?').get(jobId) as
        { kind: string; reason: string } | undefined,
  );

/** Processes whose command line mentions this path (an agent's data directory). */
function processesUsing(path: string): string[] {
  try {
    return execFileSync('pgrep', ['-f', path], { encoding: 'utf8' }).trim().split('\n').filter(Boolean);
  } catch {
    return [];
  }
}

const localPool = (over: string) =>
  `pools:\n  - { name: h100, template: { cpu: 2, memory: 2Gi, gpus: { type: h100, count: 2 } }, autoscale: { provider: local, min: 0, max: 2, ${over} } }\n`;
const gpuStage = (name: string, command: string[], count = 2) => ({ name, resources: { cpu: 1, memory: '64Mi', gpu: { count, type: 'h100' } }, command });

describe('autoscaling, end to end', () => {
  const started: RunningGantry[] = [];
  const up = async (cluster: string, dataDir?: string) => {
    const g = await startGantryUp({ cluster, env: ENV, ...(dataDir ? { dataDir } : {}) });
    started.push(g);
    return g;
  };
  afterAll(async () => {
    for (const g of started.reverse()) await g.stop();
    for (const g of started) rmSync(g.dataDir, { recursive: true, force: true });
  });

  it('a burst of GPU stages starts local machines, every stage succeeds, the idle machines drain and stop; nothing is killed', async () => {
    const g = await up(localPool('idleSeconds: 2, bootTimeoutSeconds: 60'));
    const r = await submit(g.url, { name: 'burst', stages: [1, 2, 3, 4].map((i) => gpuStage(`train-${i}`, ['sleep', '1'])) });
    expect(r.status).toBe(201);
    const job = await until('the burst ends', () => jobOf(g.url, r.body.id), isTerminal, 60_000);
    expect(job.state).toBe('succeeded');
    // No attempt was lost, preempted or killed: one attempt each, and it succeeded.
    for (const s of job.stages) expect(s.attempts.map((a: { state: string }) => a.state)).toEqual(['succeeded']);
    // On the pool's machines (both started and joined, below; which ran what is the scheduler's call).
    for (const s of job.stages) expect(['h100-1', 'h100-2']).toContain(s.attempts[0]!.machine);
    // Idle for 2 s: drained, released, stopped by the provider; their agents are gone.
    const rows = await until(
      'the machines released and stopped',
      async () => rowsOf(g),
      (rs) => rs.length === 2 && rs.every((x) => x.lifecycle === 'released' && x.stopped_at !== null),
      30_000,
    );
    expect(rows.map((x) => [x.name, x.joined_at !== null, x.fail_reason])).toEqual([
      ['h100-1', true, null],
      ['h100-2', true, null],
    ]);
    expect(eventsOf(g, 'autoscale:drain')).toHaveLength(2);
    expect(eventsOf(g, 'autoscale:release')).toHaveLength(2);
    expect(eventsOf(g, 'autoscale:fail')).toHaveLength(0);
    await until(
      'their agents gone',
      async () => processesUsing(join(g.dataDir, 'agents', 'h100-')),
      (ps) => ps.length === 0,
      15_000,
    );
    const machines = (await api(g.url, '/v1/machines')).body.machines as { name: string }[];
    expect(machines.map((m) => m.name)).not.toContain('h100-1');
  }, 90_000);

  it('a stage no template fits, and one its team quota stops, start nothing, and say why', async () => {
    const g = await up(localPool('idleSeconds: 60, bootTimeoutSeconds: 60'));
    const misfit = await submit(g.url, {
      name: 'needs-a100',
      stages: [{ ...gpuStage('train', ['true'], 1), resources: { cpu: 1, memory: '64Mi', gpu: { count: 1, type: 'a100' } } }],
    });
    expect(misfit.status).toBe(201);
    const team = await api(g.url, '/v1/teams', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'capped', quota: { gpus: { h100: 1 } } }),
    });
    expect(team.status).toBe(201);
    const capped = await submit(g.url, { name: 'over-quota', team: 'capped', stages: [gpuStage('train', ['true'])] });
    expect(capped.status).toBe(201);
    const misfitJob = misfit.body.id as string;
    const cappedJob = capped.body.id as string;
    await until(
      'the autoscaler has said why both wait',
      async () => [waitOf(g, misfitJob), waitOf(g, cappedJob)],
      ([a, b]) => a !== undefined && b !== undefined,
      20_000,
    );
    expect(waitOf(g, misfitJob)).toMatchObject({ kind: 'gpu-type', reason: expect.stringContaining('a100') });
    expect(waitOf(g, cappedJob)).toMatchObject({ kind: 'quota', reason: expect.stringContaining('quota') });
    // Several more passes (each rewrites its word on them, dated): still nothing started.
    const lastPass = () => readDb(g, (db) => (db.prepare('select max(at) as at from autoscale_waits').get() as { at: number }).at);
    const seen = lastPass();
    await until(
      'three more passes',
      async () => lastPass(),
      (at) => at >= seen + 900,
      10_000,
    );
    expect(rowsOf(g)).toEqual([]);
    expect(eventsOf(g, 'autoscale:start')).toEqual([]);
    // What `gantry explain` tells the user: the autoscaler's word beside the scheduler's.
    const explain = await gantry(['explain', misfit.body.id, '--server', g.url]);
    expect(explain.code).toBe(0);
    expect(explain.stdout).toContain('no template has a100 GPUs');
    const quota = await gantry(['explain', capped.body.id, '--server', g.url]);
    expect(quota.code).toBe(0);
    expect(quota.stdout).toContain("its team's quota stops it, whatever machines start");
  }, 60_000);

  it('killed with SIGKILL right after deciding a start, the restarted server starts no duplicate', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'gantry-e2e-autoscale-kill-'));
    const first = await up(localPool('idleSeconds: 60, bootTimeoutSeconds: 60'), dataDir);
    const r = await submit(first.url, { name: 'one', stages: [gpuStage('train', ['sleep', '1'])] });
    await until(
      'the start decided',
      async () => eventsOf(first, 'autoscale:start'),
      (es) => es.length === 1,
      20_000,
    );
    first.proc.kill('SIGKILL');
    await new Promise((res) => first.proc.once('exit', res));
    // Its agents see their parent gone and stop.
    await until(
      'agents gone',
      async () => processesUsing(join(dataDir, 'agents')),
      (ps) => ps.length === 0,
      15_000,
    );

    const second = await up(localPool('idleSeconds: 60, bootTimeoutSeconds: 60'), dataDir);
    const job = await until('the job ends after the restart', () => jobOf(second.url, r.body.id), isTerminal, 60_000);
    expect(job.state).toBe('succeeded');
    expect(job.stages[0].attempts.at(-1).machine).toBe('h100-1');
    // One machine decided, one row, one start event, one machine registered: the same name.
    expect(rowsOf(second).map((x) => [x.name, x.lifecycle])).toEqual([['h100-1', 'ready']]);
    expect(eventsOf(second, 'autoscale:start')).toHaveLength(1);
    const machines = (await api(second.url, '/v1/machines')).body.machines as { name: string }[];
    expect(machines.map((m) => m.name).filter((n) => n.startsWith('h100'))).toEqual(['h100-1']);
  }, 90_000);

  it('the command provider gets the documented request; a machine that never joins is failed, stopped and reported', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gantry-e2e-autoscale-cmd-'));
    const script = join(dir, 'provider.sh');
    // Records each request and answers as a cloud would, starting nothing: no machine ever joins.
    writeFileSync(
      script,
      `#!/bin/bash
set -e
req=$(cat)
n=$(ls "${dir}" | grep -c '^req-' || true)
printf '%s' "$req" > "${dir}/req-$n.json"
exec node -e '
const r = JSON.parse(process.argv[1]);
if (r.action === "start") console.log(JSON.stringify({ machines: r.names.map((name) => ({ name, id: "vm-" + name })) }));
else console.log(JSON.stringify({ stopped: r.machines.map((m) => m.name) }));
' "$req"
`,
    );
    chmodSync(script, 0o755);
    const g = await up(
      `pools:\n  - { name: cloud, template: { cpu: 4, memory: 8Gi, gpus: { type: h100, count: 2 }, region: us-east, labels: { disk: ssd } }, autoscale: { provider: command, command: ${script}, min: 0, max: 1, idleSeconds: 60, bootTimeoutSeconds: 2 } }\n`,
    );
    const r = await submit(g.url, { name: 'cloudy', stages: [{ ...gpuStage('train', ['true']), placement: { region: 'us-east' } }] });
    expect(r.status).toBe(201);
    const requests = () =>
      readdirSync(dir)
        .filter((f) => f.startsWith('req-'))
        .sort()
        .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')));
    const [start, stop] = await until(
      'a start and a stop asked',
      async () => requests(),
      (rs) => rs.length >= 2,
      30_000,
    );
    const joinToken = readFileSync(join(g.dataDir, 'join.token'), 'utf8').trim();
    expect(start).toEqual({
      action: 'start',
      pool: 'cloud',
      template: { cpu: '4', memory: '8Gi', gpus: { type: 'h100', count: 2 }, region: 'us-east', labels: { disk: 'ssd' } },
      count: 1,
      names: ['cloud-1'],
      server: g.url,
      joinToken,
    });
    expect(stop).toEqual({ action: 'stop', pool: 'cloud', machines: [{ name: 'cloud-1', id: 'vm-cloud-1' }] });
    const [row] = await until(
      'the row stopped',
      async () => rowsOf(g),
      (rs) => rs[0]?.stopped_at != null,
      10_000,
    );
    expect(row).toMatchObject({ name: 'cloud-1', lifecycle: 'released', joined_at: null, fail_reason: expect.stringContaining('did not join within 2 s') });
    const failed = eventsOf(g, 'autoscale:fail');
    expect(failed).toHaveLength(1);
    expect(failed[0]!.message).toContain('cloud-1');
    // The join token is the provider's to pass on, never the log's.
    expect(existsSync(join(g.dataDir, 'server.log')) ? readFileSync(join(g.dataDir, 'server.log'), 'utf8') : '').not.toContain(joinToken);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);
});

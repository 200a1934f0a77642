import { followEvents } from '../../src/cli/client/event-stream.js';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropPostgresSchema } from '../../src/store/postgres/open-postgres-store.js';
import { FAST_TIMINGS, freePort } from '../faults/fault-harness.js';
import { api, CLI, isTerminal, REPO, until, useServerToken } from '../support/gantry-process.js';
import { freshSchema, NATS_URL, POSTGRES_URL, serviceMissing } from '../support/services.js';

/**
 * Two `gantry server` replicas on one PostgreSQL database and one NATS, and an agent that knows
 * both (`--server a,b`): the leader is killed with SIGKILL while stages run, the other replica
 * takes over within the lease's bound, and every job ends succeeded with each stage run once.
 */
const missing = (await serviceMissing('PostgreSQL', POSTGRES_URL)) ?? (await serviceMissing('NATS', NATS_URL));

const LEADER_TTL_MS = 2000;

describe.skipIf(!!missing)('replicas on PostgreSQL and NATS', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-replicas-'));
  const schema = freshSchema('replicas');
  const procs: ChildProcess[] = [];
  const env = {
    ...process.env,
    ...FAST_TIMINGS,
    // What this file kills is a replica, not a machine: the agent's leases and its machine's
    // silence are given room for a CI machine's stalls of a few seconds (FAST_TIMINGS' 2 s would
    // lose a live machine and run its stages again: what can run twice, docs/failure-detection.md).
    GANTRY_LEASE_MS: '8000',
    GANTRY_SUSPECT_AFTER_MS: '3000',
    GANTRY_LOST_AFTER_MS: '6000',
    GANTRY_DATABASE_URL: POSTGRES_URL,
    GANTRY_DATABASE_SCHEMA: schema,
    GANTRY_BUS_URL: NATS_URL,
    GANTRY_LEADER_TTL_MS: String(LEADER_TTL_MS),
    // One directory for stage outputs, as replicas must share (docs/replicas.md).
    GANTRY_ARTIFACTS_DIR: join(dir, 'artifacts'),
  };
  afterAll(async () => {
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    await dropPostgresSchema(POSTGRES_URL, schema).catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  });

  const startServer = async (name: string, extra: Record<string, string> = {}) => {
    const port = await freePort();
    const proc = spawn(process.execPath, [CLI, 'server', '--data-dir', join(dir, name), '--port', String(port)], {
      cwd: REPO,
      env: { ...env, ...extra, GANTRY_REPLICA_ID: name },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (out += d));
    procs.push(proc);
    const url = `http://127.0.0.1:${port}`;
    await until(
      'replica healthy',
      () =>
        api(url, '/healthz').then(
          (r) => r.status,
          () => 0,
        ),
      (s) => s === 200,
      60_000,
    ); // a loaded machine has taken over 30 s
    return { name, url, proc, output: () => out };
  };
  const health = (url: string) =>
    api(url, '/healthz').then(
      (r) => r.body as { replica: string; leader: boolean },
      () => null,
    );

  it('any replica serves the API; killing the leader hands the scheduler to the other; nothing is lost or run twice', async () => {
    const a = await startServer('replica-a');
    await until(
      'a leads',
      () => health(a.url),
      (h) => h?.leader === true,
    );
    const b = await startServer('replica-b');
    expect((await health(b.url))?.leader).toBe(false);
    // One database: a's admin token is good on b too.
    const token = useServerToken(a.url, join(dir, 'replica-a'));
    useServerToken(b.url, join(dir, 'replica-a'));
    expect(token).toBeTruthy();

    const join_ = await api(b.url, '/v1/tokens', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'join', name: 'replica test' }),
    });
    expect(join_.status).toBe(201);
    const marks = join(dir, 'marks');
    const agent = spawn(
      process.execPath,
      [CLI, 'agent', '--server', `${a.url},${b.url}`, '--name', 'worker', '--data-dir', join(dir, 'agent'), '--cpu', '8', '--memory', '8Gi'],
      {
        cwd: REPO,
        env: { ...env, GANTRY_JOIN_TOKEN: join_.body.token },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    procs.push(agent);
    let agentOut = '';
    agent.stderr.on('data', (d) => (agentOut += d));
    await until(
      'agent ready',
      () => api(b.url, '/v1/machines').then((r) => r.body.machines?.[0]?.health),
      (h) => h === 'ready',
      30_000,
    );

    // Each stage appends its name to a file: a stage run twice would show twice.
    // The second reads what the first wrote, through whichever replica the agent asks.
    const run = `echo "$GANTRY_JOB_ID/$GANTRY_STAGE" >> ${marks}; sleep 0.3`;
    const spec = (i: number) => ({
      name: `chain-${i}`,
      stages: [
        { name: 'first', command: ['sh', '-c', `${run}; echo "$GANTRY_JOB_ID" > "$GANTRY_OUTPUT_DIR/x"`], resources: { cpu: 0.5 } },
        {
          name: 'second',
          needs: ['first'],
          command: ['sh', '-c', `${run}; test "$(cat "$GANTRY_INPUT_DIR/first/x")" = "$GANTRY_JOB_ID"`],
          resources: { cpu: 0.5 },
        },
      ],
    });
    // Submitted to both replicas.
    const ids: string[] = [];
    for (let i = 0; i < 16; i++) {
      const r = await api(i % 2 ? a.url : b.url, '/v1/jobs', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(spec(i)),
      });
      expect(r.status).toBe(201);
      ids.push(r.body.id);
    }
    await until(
      'stages running',
      () => api(b.url, `/v1/jobs?limit=100`).then((r) => r.body.jobs.filter((j: { state: string }) => j.state === 'running').length),
      (n) => n > 0,
    );

    // Kill the leader outright, mid-work.
    const killedAt = Date.now();
    a.proc.kill('SIGKILL');
    await until(
      'b leads',
      () => health(b.url),
      (h) => h?.leader === true,
      20_000,
    );
    const failoverMs = Date.now() - killedAt;
    // The bound (docs/replicas.md): the lease's TTL plus one renewal period, with room for a slow machine.
    expect(failoverMs).toBeLessThan(LEADER_TTL_MS + LEADER_TTL_MS / 3 + 3000);
    console.log(`leader failover took ${failoverMs} ms (lease ${LEADER_TTL_MS} ms)`);

    const jobs = await until(
      'every job ended',
      () => Promise.all(ids.map((id) => api(b.url, `/v1/jobs/${id}`).then((r) => r.body))),
      (js) => js.every((j) => isTerminal(j)),
      60_000,
    );
    expect(jobs.map((j) => j.state)).toEqual(ids.map(() => 'succeeded'));
    const lines = readFileSync(marks, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(ids.length * 2);
    expect(new Set(lines).size).toBe(lines.length);
    // The new term is on record: the event stream from the start of the log, through the replica that is left.
    const elected: string[] = [];
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), 10_000);
    await followEvents({
      url: `${b.url}/v1/events?after=0`,
      headers: { authorization: `Bearer ${token}` },
      signal: stop.signal,
      onEvent: (e) => {
        if (e.type === 'leader:elected') elected.push(e.message.split(' ')[0]!);
        return elected.length < 2;
      },
    });
    clearTimeout(timer);
    expect(elected).toEqual(['replica-a', 'replica-b']);
    agent.kill('SIGTERM');
  }, 120_000);

  it.skipIf(!existsSync('/usr/sbin/nats-server'))(
    'NATS goes away mid-work: every job still ends, slower; when it returns the replicas reconnect by themselves',
    async () => {
      // A NATS of this test's own, so that it can be killed and started again on the same port.
      const natsPort = await freePort();
      const natsDir = join(dir, 'nats');
      const startNats = () => {
        const p = spawn('/usr/sbin/nats-server', ['-a', '127.0.0.1', '-p', String(natsPort), '-js', '-sd', natsDir], { stdio: 'ignore' });
        procs.push(p);
        return p;
      };
      let nats = startNats();
      const own = { GANTRY_BUS_URL: `nats://127.0.0.1:${natsPort}`, GANTRY_DATABASE_SCHEMA: `${schema}_nats` };
      try {
        const a = await startServer('nats-a', own);
        const b = await startServer('nats-b', own);
        useServerToken(a.url, join(dir, 'nats-a'));
        useServerToken(b.url, join(dir, 'nats-a'));
        const j = await api(a.url, '/v1/tokens', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ kind: 'join', name: 'nats test' }),
        });
        const agent = spawn(
          process.execPath,
          [CLI, 'agent', '--server', `${b.url},${a.url}`, '--name', 'nats-worker', '--data-dir', join(dir, 'nats-agent'), '--cpu', '4', '--memory', '4Gi'],
          {
            cwd: REPO,
            env: { ...env, GANTRY_JOIN_TOKEN: j.body.token },
            stdio: 'ignore',
          },
        );
        procs.push(agent);
        await until(
          'agent ready',
          () => api(a.url, '/v1/machines').then((r) => r.body.machines?.[0]?.health),
          (h) => h === 'ready',
          30_000,
        );
        const submitSome = async (tag: string, n: number) => {
          const ids: string[] = [];
          for (let i = 0; i < n; i++) {
            const r = await api(i % 2 ? a.url : b.url, '/v1/jobs', {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({
                name: `${tag}-${i}`,
                stages: [
                  { name: 'x', command: ['true'], resources: { cpu: 0.5 } },
                  { name: 'y', needs: ['x'], command: ['true'], resources: { cpu: 0.5 } },
                ],
              }),
            });
            ids.push(r.body.id);
          }
          return ids;
        };
        const allSucceeded = (ids: string[]) =>
          until(
            'jobs end',
            () => Promise.all(ids.map((id) => api(a.url, `/v1/jobs/${id}`).then((r) => r.body.state))),
            (st) => st.every((x) => ['succeeded', 'failed', 'canceled'].includes(x)),
            60_000,
          );

        expect(await allSucceeded(await submitSome('before', 6))).toEqual(Array(6).fill('succeeded'));
        nats.kill('SIGKILL');
        await until(
          'a replica noticed',
          async () => a.output() + b.output(),
          (o) => o.includes('NATS connection lost'),
          15_000,
        );
        // Without the bus: placements and wake-ups come from the periodic passes and held polls' ends.
        expect(await allSucceeded(await submitSome('without', 6))).toEqual(Array(6).fill('succeeded'));
        nats = startNats();
        await until(
          'both reconnected',
          async () => [a.output(), b.output()],
          (o) => o.every((x) => /NATS connection up.*reconnected|"state":"reconnected"/.test(x)),
          30_000,
        );
        expect(await allSucceeded(await submitSome('after', 6))).toEqual(Array(6).fill('succeeded'));
        agent.kill('SIGTERM');
      } finally {
        nats.kill('SIGKILL');
        await dropPostgresSchema(POSTGRES_URL, own.GANTRY_DATABASE_SCHEMA).catch(() => {});
      }
    },
    150_000,
  );
});

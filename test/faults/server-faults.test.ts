/**
 * Faults of the control plane: the server SIGKILLed during a burst of submissions and restarted
 * on its data dir; a bus that drops, duplicates, delays and reorders every message.
 */
import { writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { cleanUpClustersAfterEach, Cluster, describeJob, sleep, stageOf, waitForLine } from './fault-harness.js';
import { FAST_RETRY, job, seeded, stage } from './stage-script.js';

describe('fault injection: the control plane', () => {
  cleanUpClustersAfterEach(afterEach);

  it('server SIGKILLed during a burst of submissions: every accepted job exists once and ends', async () => {
    const rand = seeded(404);
    const TOTAL = 40;
    const c = await Cluster.start('server-kill');
    await Promise.all([c.startAgent('a1'), c.startAgent('a2')]);
    const spec = (i: number) =>
      i % 2 === 0
        ? job(`burst-${i}`, [stage(c.history, 'only', { body: 'sleep 0.1' })])
        : job(`burst-${i}`, [stage(c.history, 'first', { body: 'sleep 0.1' }), stage(c.history, 'second', { needs: ['first'], body: 'true' })]);

    const accepted: string[] = [];
    let failedTries = 0;
    let lastAccepted = Date.now();
    let next = 0;
    const submitter = async () => {
      for (let i = next++; i < TOTAL; i = next++) {
        for (;;) {
          try {
            // One key per job, kept across retries: a submit committed just before the server
            // died, whose answer was lost, is answered with its job when retried, not made twice.
            accepted.push(await c.submit(spec(i), `burst-key-${i}`));
            lastAccepted = Date.now();
            break;
          } catch (err) {
            // Unreachable, or the answer died with the server: not accepted, try again, for as long
            // as a restart may take on a loaded machine.
            failedTries++;
            if (Date.now() - lastAccepted > 60_000) throw err;
            await sleep(100);
          }
        }
      }
    };
    // Three kills, each once a seeded number of jobs has been accepted, a seeded moment later.
    const killAfter = [0, 1, 2].map((k) => Math.floor(((k + rand()) * TOTAL) / 3.5) + 1);
    const killer = async () => {
      for (const n of killAfter) {
        while (accepted.length < n) await sleep(10);
        await sleep(rand() * 150);
        await c.killServer();
        await sleep(100 + rand() * 600);
        await c.startServer();
      }
    };
    await Promise.all([submitter(), submitter(), killer()]);
    expect(accepted).toHaveLength(TOTAL);
    expect(new Set(accepted).size).toBe(TOTAL);

    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
    const known = new Map(r.jobs.map((j) => [j.id, j]));
    for (const id of accepted) {
      const j = known.get(id);
      expect(j, `accepted job ${id} is missing`).toBeDefined();
      expect(j!.state, describeJob(j!)).toBe('succeeded');
    }
    // Exactly one job per submission: retries made no second one.
    expect(r.jobs.map((j) => j.name).sort()).toEqual(Array.from({ length: TOTAL }, (_, i) => `burst-${i}`).sort());
    const lost = r.jobs.flatMap((j) => j.stages.flatMap((s) => s.attempts.filter((a) => a.state === 'lost'))).length;
    console.log(
      `server-kill: kills after ${killAfter.join(', ')} accepted; ${failedTries} failed tries; ${r.jobs.length} jobs (${accepted.length} accepted); ${lost} lost attempts`,
    );
  }, 120_000);

  it('server down for 30 s while a stage runs: the stage goes on and completes in one attempt', async () => {
    const c = await Cluster.start('server-outage');
    await c.startAgent('a1');
    const id = await c.submit(job('outlives-outage', [stage(c.history, 'long', { body: 'sleep 31' }), stage(c.history, 'after', { needs: ['long'] })]));
    await waitForLine(c, 'long started', (l) => l.ev === 'start' && l.job === id);
    await c.killServer();
    // Down for 30 s, fifteen leases at these timings: the agent keeps the stage running, and the
    // server, back, does not count its own downtime against the machine or the lease.
    await sleep(30_000);
    await c.startServer();
    const [j] = await c.waitAllTerminal(30_000);
    expect(j!.state, describeJob(j!)).toBe('succeeded');
    expect(stageOf(j!, 'long').attempts.map((a) => a.state)).toEqual(['succeeded']);
    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
  }, 120_000);

  it("server down for a stage's whole run: its log arrives whole after the server is back, before its outcome", async () => {
    const c = await Cluster.start('log-outage');
    await c.startAgent('a1');
    const body = 'sleep 0.5; i=0; while [ $i -lt 20 ]; do say "line $i"; warn "err $i"; i=$((i+1)); sleep 0.05; done';
    const id = await c.submit(job('log-while-down', [stage(c.history, 'talk', { body })]));
    await waitForLine(c, 'talk started', (l) => l.ev === 'start' && l.job === id);
    await c.killServer();
    await waitForLine(c, 'talk ended', (l) => l.ev === 'end' && l.job === id);
    await sleep(1000);
    await c.startServer();
    const [j] = await c.waitAllTerminal(30_000);
    expect(j!.state, describeJob(j!)).toBe('succeeded');
    expect(stageOf(j!, 'talk').attempts.map((a) => a.state)).toEqual(['succeeded']);
    const log = await c.attemptLog(id, 'talk', 1);
    expect(log.stdout.split('\n').filter((l) => l.startsWith('line ')).length).toBe(20);
    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
  }, 90_000);

  it('a stage printing 50 MB while the server restarts twice: its log has every byte once', async () => {
    const c = await Cluster.start('log-50mb');
    await c.startAgent('a1');
    // Slices of 5 MB (base64 lines), written 0.6 s apart, ten at least and on until both restarts
    // are done (a loaded machine may take seconds to start a server); the copy kept for the checker
    // is the same bytes. At most twelve (61 MB): a log is kept up to 64 MiB, and on a machine slow
    // enough to need a fourteenth slice the checker found the log cut there; past twelve the
    // process only waits for the restarts.
    const restarted = `${c.history}.restarted`;
    const body = `i=0; while [ $i -lt 10 ] || [ ! -e "${restarted}" ]; do if [ $i -lt 12 ]; then head -c 3750000 /dev/urandom | base64 > "$WROTE.slice"; cat "$WROTE.slice"; cat "$WROTE.slice" >> "$WROTE.out"; fi; i=$((i+1)); sleep 0.6; done; rm -f "$WROTE.slice"`;
    const id = await c.submit(job('big-log', [stage(c.history, 'print', { body })]));
    await waitForLine(c, 'print started', (l) => l.ev === 'start' && l.job === id);
    for (let i = 0; i < 2; i++) {
      await sleep(700);
      await c.killServer();
      await sleep(500);
      await c.startServer();
    }
    writeFileSync(restarted, '');
    const [j] = await c.waitAllTerminal(60_000);
    expect(j!.state, describeJob(j!)).toBe('succeeded');
    const log = await c.attemptLog(id, 'print', 1);
    expect(log.stdout.length).toBeGreaterThan(50_000_000);
    // Both kills fell while the process was printing.
    const ran = c.procLines().filter((l) => l.job === id);
    const [from, to] = [ran.find((l) => l.ev === 'start')!.t, ran.find((l) => l.ev === 'end')!.t];
    const kills = c.harnessLines().filter((l) => l.what === 'server-kill' && l.t > from && l.t < to);
    expect(kills.length).toBe(2);
    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
  }, 120_000);

  it('bus chaos (drop, duplicate, delay, reorder): the same final states as a faithful bus', async () => {
    const c = await Cluster.start('bus-chaos', { GANTRY_BUS_CHAOS: 'seed=42,drop=0.3,duplicate=0.3,delay=0-300' });
    await Promise.all([c.startAgent('a1', { gpus: 'h100:2' }), c.startAgent('a2')]);
    const h = c.history;
    const flaky = 'if [ "$GANTRY_ATTEMPT" = 1 ]; then exit 3; fi; sleep 0.2';
    // name → [job state, { stage: [stage state, attempts as "state/exit"] }], known by construction.
    type Expect = [string, Record<string, [string, string[]]>];
    const ok = (n = 1): [string, string[]] => ['succeeded', [...Array(n - 1).fill('failed/3'), 'succeeded/0']];
    const workload: [object, Expect][] = [
      [
        job('diamond', [stage(h, 'a'), stage(h, 'b', { needs: ['a'] }), stage(h, 'c', { needs: ['a'] }), stage(h, 'd', { needs: ['b', 'c'] })]),
        ['succeeded', { a: ok(), b: ok(), c: ok(), d: ok() }],
      ],
      [
        job('gpu', [stage(h, 'prep'), stage(h, 'train', { needs: ['prep'], gpu: 1, body: 'sleep 0.5' }), stage(h, 'eval', { needs: ['train'] })]),
        ['succeeded', { prep: ok(), train: ok(), eval: ok() }],
      ],
      [job('flaky', [stage(h, 'try', { body: flaky }), stage(h, 'then', { needs: ['try'] })]), ['succeeded', { try: ok(2), then: ok() }]],
      [
        job('fails-midway', [stage(h, 'a'), stage(h, 'b', { needs: ['a'], body: 'exit 3' }), stage(h, 'c', { needs: ['b'] })]),
        ['failed', { a: ok(), b: ['failed', ['failed/3', 'failed/3']], c: ['skipped', []] }],
      ],
      [
        job('fails-first', [stage(h, 'root', { body: 'exit 3', retry: FAST_RETRY }), stage(h, 'x', { needs: ['root'] }), stage(h, 'y', { needs: ['root'] })]),
        ['failed', { root: ['failed', ['failed/3', 'failed/3']], x: ['skipped', []], y: ['skipped', []] }],
      ],
      [job('gpu-flaky', [stage(h, 'train', { gpu: 2, body: flaky })]), ['succeeded', { train: ok(2) }]],
    ];
    const ids = new Map<string, Expect>();
    for (const [spec, want] of workload) ids.set(await c.submit(spec as { name: string }), want);

    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
    let lost = 0;
    for (const [id, [jobState, stages]] of ids) {
      const j = r.jobs.find((x) => x.id === id)!;
      const got: Expect = [j.state, {}];
      for (const name of Object.keys(stages)) {
        const s = stageOf(j, name);
        // Lost attempts are the infrastructure's, not the workload's: compare the rest.
        lost += s.attempts.filter((a) => a.state === 'lost').length;
        got[1][name] = [s.state, s.attempts.filter((a) => a.state !== 'lost').map((a) => `${a.state}/${a.exitCode}`)];
      }
      expect(got, describeJob(j)).toEqual([jobState, stages]);
    }
    console.log(`bus-chaos: ${ids.size} jobs as expected; ${lost} lost attempts`);
  }, 90_000);
});

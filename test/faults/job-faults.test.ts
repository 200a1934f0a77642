/**
 * Faults from the jobs' side: cancels at random moments (one of them while a stage is finishing,
 * one of a stage that ignores TERM), and poison stages that fail, die by signal or hang.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { until } from '../support/gantry-process.js';
import { cleanUpClustersAfterEach, Cluster, describeJob, KILL_GRACE_MS, sleep, stageOf, waitForLine } from './fault-harness.js';
import { attemptGroupAlive } from './processes.js';
import { job, seeded, stage } from './stage-script.js';

describe('fault injection: cancels and poison stages', () => {
  cleanUpClustersAfterEach(afterEach);

  it('cancel at random moments: nothing starts after it, every process is gone within the grace', async () => {
    const rand = seeded(606);
    const c = await Cluster.start('cancel');
    // Two GPU machines and a CPU machine: GPU machines keep their CPUs for GPU work (docs/scheduling.md).
    await Promise.all([c.startAgent('a1', { gpus: 'h100:2' }), c.startAgent('a2', { gpus: 'h100:2' }), c.startAgent('a3')]);
    const h = c.history;
    const chain = (name: string, first = 'sleep 0.5') =>
      job(name, [
        stage(h, 's1', { body: first }),
        stage(h, 's2', { needs: ['s1'], gpu: 1, body: 'sleep 1.5' }),
        stage(h, 's3', { needs: ['s2'], body: 'sleep 0.5' }),
      ]);
    const cancels: Promise<{ id: string; changed: boolean }>[] = [];
    for (let i = 0; i < 8; i++) {
      const id = await c.submit(chain(`random-${i}`));
      const delay = rand() * 4000;
      cancels.push(sleep(delay).then(async () => ({ id, ...(await c.cancel(id)) })));
    }
    // While a stage is finishing: the moment its end line is written, before the agent has reported it.
    const finishing = await c.submit(chain('while-finishing', 'sleep 1'));
    cancels.push(
      (async () => {
        for (let t = Date.now(); Date.now() - t < 30_000; await sleep(5)) {
          if (c.procLines().some((l) => l.ev === 'end' && l.job === finishing && l.stage === 's1')) break;
        }
        return { id: finishing, ...(await c.cancel(finishing)) };
      })(),
    );
    // A stage that ignores TERM: KILL after the grace.
    const stubborn = await c.submit(job('ignores-term', [stage(h, 'hold', { body: "trap '' TERM; sleep 30" })]));
    const held = await waitForLine(c, 'stubborn stage started', (l) => l.ev === 'start' && l.job === stubborn);
    await sleep(rand() * 500);
    const { t: canceledAt } = await c.cancel(stubborn);
    await until(
      'stubborn group killed',
      async () => attemptGroupAlive(held.pid, held.attemptId),
      (alive) => !alive,
      KILL_GRACE_MS + 5000,
    );
    const goneAfter = Date.now() - canceledAt;
    expect(goneAfter).toBeLessThanOrEqual(KILL_GRACE_MS + 2000 + 500);

    const outcomes = await Promise.all(cancels);
    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
    for (const o of [...outcomes, { id: stubborn, changed: true }]) {
      const j = r.jobs.find((x) => x.id === o.id)!;
      // A cancel that changed something wins; one that did not came after the job had ended.
      expect(j.state, describeJob(j)).toBe(o.changed ? 'canceled' : 'succeeded');
      if (o.changed) expect(j.cancelRequestedAt).not.toBeNull();
    }
    const canceled = r.jobs.filter((j) => j.state === 'canceled').length;
    expect(canceled).toBeGreaterThanOrEqual(5);
    const fin = r.jobs.find((j) => j.id === finishing)!;
    console.log(`cancel: ${canceled}/${r.jobs.length} canceled; stubborn group gone ${goneAfter} ms after the cancel; while-finishing: ${describeJob(fin)}`);
  }, 90_000);

  /**
   * A cluster of one agent of one CPU, whose first report answer carrying a stage started at
   * placement is held until the test lets it go; the job is canceled meanwhile (the stage runs in
   * the store, its agent not told yet) and the answer released. Answers the job and what ran.
   */
  const cancelWhileHeld = async (name: string, jobs: (h: string) => { hold?: { name: string }; target: { name: string } }) => {
    // A heartbeat of 1 s: an answer held longer than two periods and one is a lost answer, reaped
    // (machine-faults.test.ts); at 300 ms a slow moment of the harness (PostgreSQL) could get there first.
    const c = await Cluster.start(name, {
      GANTRY_HEARTBEAT_MS: '1000',
      GANTRY_SUSPECT_AFTER_MS: '2000',
      GANTRY_LOST_AFTER_MS: '4000',
      GANTRY_LEASE_MS: '4000',
    });
    await c.startAgent('a1', { cpu: 1, env: { GANTRY_AGENT_FAULT: 'hold-started-answer' } });
    const specs = jobs(c.history);
    if (specs.hold) await c.submit(specs.hold);
    const id = await c.submit(specs.target);
    const data = join(c.dir, 'agents', 'a1');
    await until('an answer held', async () => existsSync(join(data, 'fault-hold-started-answer.held')), Boolean, 30_000);
    const placed = stageOf(await c.job(id), 'second');
    expect([placed.state, placed.attempts.map((a) => a.state)]).toEqual(['running', ['running']]);
    const { t: canceledAt } = await c.cancel(id);
    writeFileSync(join(data, 'fault-hold-started-answer.release'), '');
    return { c, id, canceledAt };
  };

  it('canceled while the answer that started its stage travels: its process may start, and is killed within a heartbeat and the grace', async () => {
    // `second` waits for the one CPU; `first`'s outcome frees it, and its report's transaction starts `second`.
    const { c, id, canceledAt } = await cancelWhileHeld('cancel-started', (h) => ({
      hold: job('frees-the-cpu', [stage(h, 'first', { body: 'sleep 0.5' })]),
      target: job('canceled-in-flight', [stage(h, 'second', { body: 'sleep 30' })]),
    }));
    // Its first line: the start, or only the end when the kill came before the script wrote its
    // start (the TERM trap is set first, so a kill that fast still writes the end, code 143).
    const first = await waitForLine(c, 'second started after the cancel', (l) => (l.ev === 'start' || l.ev === 'end') && l.job === id && l.stage === 'second');
    const started = c.procLines().find((l) => l.ev === 'start' && l.attemptId === first.attemptId) ?? first;
    if (started.ev === 'end') expect(started.code).toBe(143);
    expect(started.t).toBeGreaterThan(canceledAt);
    await until(
      'its group killed',
      async () => attemptGroupAlive(started.pid, started.attemptId),
      (alive) => !alive,
      KILL_GRACE_MS + 5000,
    );
    const r = await c.check();
    // The checker bounds its end: one heartbeat period and the kill grace after it started.
    expect(r.violations, r.report).toEqual([]);
    const j = r.jobs.find((x) => x.id === id)!;
    expect(j.state, describeJob(j)).toBe('canceled');
    expect(stageOf(j, 'second').attempts.map((a) => a.state)).toEqual(['canceled']);
    const end = c.procLines().find((l) => l.ev === 'end' && l.attemptId === started.attemptId);
    console.log(
      `cancel-started: process started ${started.t - canceledAt} ms after the cancel, ended ${end ? `${end.t - started.t} ms after its start` : '(no end line)'}`,
    );
  }, 90_000);

  it('canceled while the answer that started a stage with inputs travels: its inputs are refused, and it never runs', async () => {
    const { c, id } = await cancelWhileHeld('cancel-started-inputs', (h) => ({
      target: job('canceled-in-flight', [stage(h, 'first', { body: 'true' }), stage(h, 'second', { needs: ['first'], body: 'sleep 30' })]),
    }));
    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
    const j = r.jobs.find((x) => x.id === id)!;
    expect(j.state, describeJob(j)).toBe('canceled');
    expect(stageOf(j, 'second').attempts.map((a) => a.state)).toEqual(['canceled']);
    // Its download of first's outputs is fenced by its token (409): the agent drops it before the spawn.
    expect(c.procLines().filter((l) => l.stage === 'second')).toEqual([]);
  }, 90_000);

  it('poison stages use up exactly their attempts, while normal jobs beside them succeed', async () => {
    const rand = seeded(707);
    const c = await Cluster.start('poison');
    await Promise.all([c.startAgent('a1'), c.startAgent('a2')]);
    const h = c.history;
    const retry = (maxAttempts: number) => ({ maxAttempts, backoff: { initialSeconds: 1, maxSeconds: 1 } });
    type Check = (a: { exitCode: number | null; signal: string | null; reason: string | null }) => boolean;
    const poison: [object, number, Check, string][] = [
      [job('exit-code', [stage(h, 'p', { body: 'exit 3', retry: retry(3) })]), 3, (a) => a.exitCode === 3, 'exit code 3'],
      [job('by-signal', [stage(h, 'p', { body: 'kill -9 $$', retry: retry(2) })]), 2, (a) => a.signal === 'SIGKILL', 'SIGKILL'],
      [job('hangs', [stage(h, 'p', { body: 'sleep 30', timeoutSeconds: 1, retry: retry(2) })]), 2, (a) => /timeout/.test(a.reason ?? ''), 'timeout'],
      [
        job('hangs-ignoring-term', [stage(h, 'p', { body: 'sleep 30', ignoresTerm: true, timeoutSeconds: 3, retry: retry(2) })]),
        2,
        (a) => /timeout/.test(a.reason ?? '') && a.signal === 'SIGKILL',
        'timeout, then SIGKILL',
      ],
    ];
    const normal = [0, 1, 2, 3].map((i) => job(`normal-${i}`, [stage(h, 'a', { body: 'sleep 0.3' }), stage(h, 'b', { needs: ['a'], body: 'sleep 0.3' })]));
    // Submitted interleaved, in a seeded order.
    const all = [...poison.map((p) => ({ spec: p[0], poison: p })), ...normal.map((spec) => ({ spec, poison: null }))];
    for (let i = all.length - 1; i > 0; i--) {
      const k = Math.floor(rand() * (i + 1));
      [all[i], all[k]] = [all[k]!, all[i]!];
    }
    const submitted: { id: string; poison: (typeof poison)[number] | null }[] = [];
    for (const x of all) submitted.push({ id: await c.submit(x.spec as { name: string }), poison: x.poison });

    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
    for (const s of submitted) {
      const j = r.jobs.find((x) => x.id === s.id)!;
      if (!s.poison) {
        expect(j.state, describeJob(j)).toBe('succeeded');
        continue;
      }
      const [, max, check, what] = s.poison;
      const p = stageOf(j, 'p');
      expect(j.state, describeJob(j)).toBe('failed');
      expect(p.state).toBe('failed');
      expect(
        p.attempts.map((a) => a.state),
        describeJob(j),
      ).toEqual(Array(max).fill('failed'));
      for (const a of p.attempts) expect(check(a), `${what}: ${describeJob(j)}`).toBe(true);
      expect(j.failureReason, describeJob(j)).toBeTruthy();
    }
  }, 90_000);
});

/**
 * Faults of machines and agents: a machine dies mid-stage; an agent dies between recording an
 * exit and reporting it; an agent is frozen past its lease. Each scenario ends with the checker.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { api, until } from '../support/gantry-process.js';
import { cleanUpClustersAfterEach, Cluster, describeJob, KILL_GRACE_MS, sleep, stageOf, waitForLine } from './fault-harness.js';
import { readAttemptRecords } from '../../src/agent/disk/attempt-journal.js';
import { attemptGroupAlive } from './processes.js';
import { job, pipeline, seeded, stage } from './stage-script.js';

describe('fault injection: machines and agents', () => {
  cleanUpClustersAfterEach(afterEach);

  it('machine death mid-stage: the stage runs elsewhere, the job succeeds, one committed output', async () => {
    const rand = seeded(101);
    const c = await Cluster.start('machine-death');
    // Two GPU machines and a CPU machine: GPU machines keep their CPUs for GPU work (docs/scheduling.md).
    await Promise.all([c.startAgent('a1', { gpus: 'h100:2' }), c.startAgent('a2', { gpus: 'h100:2' }), c.startAgent('a3')]);
    // The first attempt outlasts the kill however slow the harness is; the rerun is quick.
    const trainBody = 'if [ "$GANTRY_ATTEMPT" = 1 ]; then sleep 4; else sleep 1; fi';
    const ids = [await c.submit(pipeline(c.history, 'p0', { trainBody })), await c.submit(pipeline(c.history, 'p1', { trainBody }))];
    const target = ids[Math.floor(rand() * ids.length)]!;
    const started = await waitForLine(c, 'target train started', (l) => l.ev === 'start' && l.job === target && l.stage === 'train');
    await sleep(200 + rand() * 1000);
    await c.killMachine(started.machine);

    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
    for (const j of r.jobs) expect(j.state, describeJob(j)).toBe('succeeded');
    const train = stageOf(
      r.jobs.find((j) => j.id === target)!,
      'train',
    );
    const dead = train.attempts.find((a) => a.id === started.attemptId)!;
    expect(dead.state, describeJob(r.jobs.find((j) => j.id === target)!)).toBe('lost');
    const committed = train.attempts.find((a) => a.id === train.outputAttemptId)!;
    expect(committed.machine).not.toBe(started.machine);
    expect(train.attempts.filter((a) => a.state === 'succeeded')).toHaveLength(1);
  }, 90_000);

  it("a report's answer that started a stage is lost: the attempt is reaped within three heartbeats, and the stage runs once more", async () => {
    const c = await Cluster.start('lost-started-answer');
    // The first report answer carrying a stage started at placement never reaches the agent.
    await c.startAgent('a1', { env: { GANTRY_AGENT_FAULT: 'drop-started-answer' } });
    const id = await c.submit(
      job('lost-answer', [stage(c.history, 'first', { body: 'true' }), stage(c.history, 'second', { needs: ['first'], body: 'sleep 0.2' })]),
    );
    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
    const j = r.jobs.find((x) => x.id === id)!;
    expect(j.state, describeJob(j)).toBe('succeeded');
    const second = stageOf(j, 'second');
    expect(
      second.attempts.map((a) => a.state),
      describeJob(j),
    ).toEqual(['lost', 'succeeded']);
    const [lost, ran] = second.attempts as [(typeof second.attempts)[number], (typeof second.attempts)[number]];
    // Started at placement, and never run: no process, no record on the agent.
    expect(lost.startedAt).toBe(lost.scheduledAt);
    expect(
      c
        .procLines()
        .filter((l) => l.ev === 'start' && l.stage === 'second')
        .map((l) => l.attemptId),
    ).toEqual([ran.id]);
    expect(readAttemptRecords(join(c.dir, 'agents', 'a1'), lost.id)).toBeUndefined();
    // Reaped by the first heartbeat past two periods from its start and one from the answer:
    // three periods and a round trip at most (docs/failure-detection.md), well inside its lease.
    const heartbeatMs = 300;
    const reapedAfter = lost.finishedAt! - lost.startedAt!;
    expect(reapedAfter).toBeGreaterThanOrEqual(2 * heartbeatMs);
    expect(reapedAfter).toBeLessThan(3 * heartbeatMs + 500);
    console.log(`lost-started-answer: reaped ${reapedAfter} ms after its start; ran again ${ran.startedAt! - lost.finishedAt!} ms later`);
  }, 90_000);

  it('agent killed after the exit is recorded and before it is reported: one committed output, no stale accept', async () => {
    const rand = seeded(202);
    const c = await Cluster.start('crash-before-report');
    const fault = { GANTRY_AGENT_FAULT: 'crash-before-report' };
    // Two lanes, so each crashing agent gets exactly its own job's first stage.
    const lane = (l: string) => ({ labels: { lane: l } });
    const laned = (name: string, l: string) =>
      job(name, [
        { ...stage(c.history, 'prep', { body: 'sleep 0.3' }), placement: lane(l) },
        { ...stage(c.history, 'eval', { needs: ['prep'], body: 'sleep 0.2' }), placement: lane(l) },
      ]);
    const startLaneAgent = (name: string, l: string) => c.startAgent(name, { env: fault, labels: [`lane=${l}`] });
    await Promise.all([startLaneAgent('fast', 'fast'), startLaneAgent('slow', 'slow')]);
    const fastJob = await c.submit(laned('restart-at-once', 'fast'));
    const slowJob = await c.submit(laned('restart-after-lost', 'slow'));

    // fast: restarted at once (after a seeded pause under the lost timeout); its report may still be accepted.
    await until(
      'fast agent crashed',
      async () => c.agentAlive('fast'),
      (alive) => !alive,
      30_000,
    );
    c.note('agent-crashed', { machine: 'fast' });
    await sleep(rand() * 300);
    const fastRestart = startLaneAgent('fast', 'fast');
    // slow: restarted only once the server has given its attempt up as lost; its report must be refused.
    await until(
      'slow agent crashed',
      async () => c.agentAlive('slow'),
      (alive) => !alive,
      30_000,
    );
    c.note('agent-crashed', { machine: 'slow' });
    const slowFinished = c.procLines().find((l) => l.ev === 'end' && l.job === slowJob && l.stage === 'prep')!;
    expect(slowFinished.code).toBe(0);
    await until(
      'slow prep #1 lost',
      () => c.job(slowJob),
      (j) => stageOf(j, 'prep').attempts[0]?.state === 'lost',
      20_000,
    );
    await Promise.all([fastRestart, startLaneAgent('slow', 'slow')]);

    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
    for (const j of r.jobs) expect(j.state, describeJob(j)).toBe('succeeded');
    const slowPrep = stageOf(
      r.jobs.find((j) => j.id === slowJob)!,
      'prep',
    );
    const stale = slowPrep.attempts.find((a) => a.id === slowFinished.attemptId)!;
    expect(stale.state).toBe('lost');
    expect(slowPrep.outputAttemptId).not.toBe(stale.id);
    // The restarted agent did deliver it, and was told no.
    const reported = readAttemptRecords(join(c.dir, 'agents', 'slow'), stale.id)?.reported;
    expect(reported, c.agentOutput('slow')).toBeDefined();
    expect(reported!.result).not.toBe('accepted');

    const fastFinished = c.procLines().find((l) => l.ev === 'end' && l.job === fastJob && l.stage === 'prep')!;
    const fastPrep = stageOf(
      r.jobs.find((j) => j.id === fastJob)!,
      'prep',
    );
    const fastAttempt = fastPrep.attempts.find((a) => a.id === fastFinished.attemptId)!;
    expect(['succeeded', 'lost']).toContain(fastAttempt.state);
    if (fastAttempt.state === 'succeeded') expect(fastPrep.outputAttemptId).toBe(fastAttempt.id);
    console.log(`crash-before-report: the at-once restart's report was ${fastAttempt.state === 'succeeded' ? 'accepted' : 'too late (lost)'}`);
    // The fault fired once per data dir: the restarted agents (same env) did not crash again.
    expect(c.agentAlive('fast') && c.agentAlive('slow')).toBe(true);
  }, 90_000);

  it('agent SIGTERMed, or SIGKILLed, and restarted mid-stage: its stages are re-attached and finish in their first attempt, logs whole', async () => {
    // Restarts must come within the lease; 8 s leaves room for a slow start on a busy machine.
    const c = await Cluster.start('agent-restart', { GANTRY_LEASE_MS: '8000', GANTRY_SUSPECT_AFTER_MS: '4000', GANTRY_LOST_AFTER_MS: '8000' });
    await c.startAgent('a1');
    // Long enough (6 s) that no stage after them is placed before the restarts are over.
    const talk = 'i=0; while [ $i -lt 60 ]; do say "tick $i"; i=$((i+1)); sleep 0.1; done';
    const ids = [
      await c.submit(job('reattach-term', [stage(c.history, 'long', { body: talk }), stage(c.history, 'after', { needs: ['long'] })])),
      await c.submit(job('reattach-kill', [stage(c.history, 'long', { body: talk }), stage(c.history, 'after', { needs: ['long'] })])),
      // Ends while no agent runs: its outcome is read from the shim's status file. No stage after
      // it: one placed as the restarted agent reports this outcome would start just as the test
      // SIGKILLs that agent, and one killed between its acknowledgement and its spawn never ran
      // (rightly lost, and run again), which is not what this test is about.
      await c.submit(job('ends-while-down', [stage(c.history, 'short', { body: 'sleep 0.3; say done' })])),
    ];
    for (const id of ids) await waitForLine(c, `${id} started`, (l) => l.ev === 'start' && l.job === id);
    await c.stopAgent('a1', 'SIGTERM');
    await sleep(600);
    await c.startAgent('a1');
    await sleep(500);
    await c.killAgent('a1');
    await c.startAgent('a1');
    const jobs = await c.waitAllTerminal(30_000);
    for (const j of jobs) {
      expect(j.state, describeJob(j)).toBe('succeeded');
      for (const s of j.stages)
        expect(
          s.attempts.map((a) => a.state),
          describeJob(j),
        ).toEqual(['succeeded']);
    }
    expect(c.agentOutput('a1')).toMatch(/re-attached/);
    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
  }, 90_000);

  it('agent stopped for good with Ctrl-C: it drains (its stage finishes, nothing new lands); twice: its stage is requeued at once, charged to nothing', async () => {
    const c = await Cluster.start('agent-drain');
    await c.startAgent('a1');
    const talk = (n: number) => `i=0; while [ $i -lt ${n} ]; do say "tick $i"; i=$((i+1)); sleep 0.1; done`;
    const x = await c.submit(job('drained', [stage(c.history, 'long', { body: talk(20) }), stage(c.history, 'after', { needs: ['long'] })]));
    await waitForLine(c, 'long started', (l) => l.ev === 'start' && l.job === x);
    c.signalAgent('a1', 'SIGINT');
    await c.agentExited('a1');
    let j = await c.job(x);
    expect(
      stageOf(j, 'long').attempts.map((a) => a.state),
      describeJob(j),
    ).toEqual(['succeeded']);
    expect(stageOf(j, 'after').attempts).toEqual([]);
    expect(c.agentOutput('a1')).toMatch(/draining: no new work; waiting for 1 running attempt/);
    const a1 = (await api(c.url, '/v1/machines/a1')).body as { scheduling: string };
    expect(a1.scheduling).toBe('drained');

    await c.startAgent('a2');
    const y = await c.submit(job('requeued', [stage(c.history, 'work', { body: 'if [ "$GANTRY_ATTEMPT" = 1 ]; then sleep 30; fi' })]));
    await waitForLine(c, 'work started', (l) => l.ev === 'start' && l.job === y);
    c.signalAgent('a2', 'SIGINT');
    await until(
      'a2 draining',
      async () => c.agentOutput('a2'),
      (o) => /draining: no new work/.test(o),
      10_000,
    );
    c.signalAgent('a2', 'SIGINT');
    await c.agentExited('a2');
    await c.startAgent('a3');
    const jobs = await c.waitAllTerminal(30_000);
    for (const jj of jobs) expect(jj.state, describeJob(jj)).toBe('succeeded');
    j = jobs.find((jj) => jj.id === y)!;
    const work = stageOf(j, 'work');
    expect(
      work.attempts.map((a) => [a.state, a.machine]),
      describeJob(j),
    ).toEqual([
      ['lost', 'a2'],
      ['succeeded', 'a3'],
    ]);
    expect(work.attempts[0]!.reason).toMatch(/^stopped: machine a2 drained at once/);
    expect([work.attemptsUsed, work.lostUsed]).toEqual([0, 0]);
    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
  }, 90_000);

  it('agent frozen past its lease: its attempts are lost, never committed, and its processes killed on resume', async () => {
    const c = await Cluster.start('sigstop');
    await c.startAgent('a1');
    const firstSlow = (s: number) => `if [ "$GANTRY_ATTEMPT" = 1 ]; then sleep ${s}; else sleep 0.5; fi`;
    // A: still running when the agent wakes (it must kill it). B: ends while the agent is frozen (its report must not count).
    const a = await c.submit(job('still-running', [stage(c.history, 'work', { body: firstSlow(20) }), stage(c.history, 'after', { needs: ['work'] })]));
    const b = await c.submit(job('ends-while-frozen', [stage(c.history, 'work', { body: firstSlow(3.5) }), stage(c.history, 'after', { needs: ['work'] })]));
    const aStart = await waitForLine(c, 'A started', (l) => l.ev === 'start' && l.job === a);
    const bStart = await waitForLine(c, 'B started', (l) => l.ev === 'start' && l.job === b);
    await c.startAgent('a2');
    const stoppedAt = c.pause('a1');
    await until(
      'both first attempts lost',
      () => Promise.all([c.job(a), c.job(b)]),
      (js) => js.every((j) => stageOf(j, 'work').attempts[0]?.state === 'lost'),
      20_000,
    );
    if (c.procLines().some((l) => l.ev === 'end' && l.attemptId === bStart.attemptId && l.t < stoppedAt)) console.log('sigstop: B ended before the freeze');
    else await waitForLine(c, 'B ended while frozen', (l) => l.ev === 'end' && l.attemptId === bStart.attemptId, 15_000);
    await sleep(300);
    const resumedAt = c.resume('a1');
    // The lease check (at most 1 s), then TERM, then the grace: the frozen copy is gone.
    await until(
      'frozen attempt killed',
      async () => attemptGroupAlive(aStart.pid, aStart.attemptId),
      (alive) => !alive,
      1000 + KILL_GRACE_MS + 3000,
    );

    const r = await c.check();
    expect(r.violations, r.report).toEqual([]);
    for (const j of r.jobs) expect(j.state, describeJob(j)).toBe('succeeded');
    for (const s of [aStart, bStart]) {
      const work = stageOf(
        r.jobs.find((j) => j.id === s.job)!,
        'work',
      );
      expect(work.attempts.find((x) => x.id === s.attemptId)!.state).toBe('lost');
      expect(work.outputAttemptId).not.toBe(s.attemptId);
    }
    const aEnd = c.procLines().find((l) => l.ev === 'end' && l.attemptId === aStart.attemptId);
    expect(aEnd?.code).toBe(143); // TERM-killed by its agent...
    expect(aEnd!.t).toBeGreaterThanOrEqual(resumedAt); // ...once it woke up
    const bEnd = c.procLines().find((l) => l.ev === 'end' && l.attemptId === bStart.attemptId);
    if (bEnd && bEnd.t > stoppedAt) expect(bEnd.code).toBe(0);
    const refused = c
      .serverOutput()
      .split('\n')
      .filter((l) => l.includes('stale report refused')).length;
    // B's process ended on its own while its agent was frozen: on waking, the agent either reports
    // it and the server refuses the late report (its attempt was lost and given away meanwhile), or
    // hears first, from the heartbeat that went out as it woke, that the attempt is lost, and
    // withdraws it (its log was still being shipped, which comes before the outcome).
    const bRecord = readAttemptRecords(join(c.dir, 'agents', 'a1'), bStart.attemptId)?.reported;
    if (bEnd && bEnd.t > stoppedAt && refused === 0)
      expect(bRecord, c.agentOutput('a1')).toMatchObject({ result: 'dropped', note: expect.stringMatching(/lost/) });
    console.log(
      `sigstop: frozen ${resumedAt - stoppedAt} ms; server refused ${refused} stale outcome(s); B ended ${bEnd && bEnd.t > stoppedAt ? 'while frozen' : 'before the freeze'}`,
    );
  }, 90_000);
});

import { afterEach, describe, expect, it } from 'vitest';
import type { JobView, MachineView } from '../../src/api/contract/job-view.js';
import { cleanUpClustersAfterEach, Cluster, describeJob, sleep, stageOf } from '../faults/fault-harness.js';
import { api, gantry, until } from '../support/gantry-process.js';

/**
 * An operator takes a machine out of service and back with the built CLI, against a real server
 * and agent: cordon, uncordon, drain (--wait) while a stage runs, remove, and the agent coming back.
 */
describe('gantry machine cordon | uncordon | drain | remove, end to end', () => {
  cleanUpClustersAfterEach(afterEach);

  it('cordon holds new work; uncordon runs it; drain lets a running stage finish and places nothing new; remove forgets the machine, not the history', async () => {
    const c = await Cluster.start('machine-service');
    // m1's work is pinned to it (label home=m1), so a second machine joining later cannot take it.
    const m1 = { cpu: 2, labels: ['home=m1'] };
    await c.startAgent('m1', m1);
    const cli = (...args: string[]) => gantry([...args, '--server', c.url]);
    const job = (id: string) => c.job(id);
    const cpu = { cpu: 0.5, memory: '64Mi' };
    const home = { labels: { home: 'm1' } };

    // Cordoned: a submitted job stays queued, and says why.
    const cordon = await cli('machine', 'cordon', 'm1');
    expect(cordon.code, cordon.stderr).toBe(0);
    expect(cordon.stdout).toBe('cordoned m1: no new work is placed there; nothing runs there\n');
    const held = await c.submit({ name: 'held', stages: [{ name: 'a', resources: cpu, command: ['true'] }] } as { name: string });
    const status = await cli('status', held, '--json');
    expect(status.code, status.stderr).toBe(0);
    expect((JSON.parse(status.stdout) as JobView).stages[0]!.pendingReason).toBe('no ready machine can run it: 1 cordoned');
    // Several scheduler passes (one a second at least, and one at once on submit) place nothing.
    await sleep(1500);
    expect((await job(held)).state).toBe('queued');
    expect((await job(held)).stages[0]!.attempts).toEqual([]);
    expect((await cli('machines')).stdout).toMatch(/^m1\s+ready,cordoned\s/m);

    // Uncordoned: it runs.
    const uncordon = await cli('machine', 'uncordon', 'm1');
    expect([uncordon.code, uncordon.stdout]).toEqual([0, 'uncordoned m1: back in service\n']);
    expect(
      (
        await until(
          'held job ends',
          () => job(held),
          (j) => j.state === 'succeeded',
        )
      ).stages[0]!.attempts[0]!.machine,
    ).toBe('m1');

    // Drain while a stage runs: it finishes; the next stage is not placed; the machine is drained.
    const pipeline = await c.submit({
      name: 'pipeline',
      stages: [
        { name: 'first', resources: cpu, placement: home, command: ['sh', '-c', 'sleep 6; echo first done'] }, // long enough for a CLI started on a loaded machine
        { name: 'second', needs: ['first'], resources: cpu, placement: home, command: ['true'] },
      ],
    } as { name: string });
    await until(
      'first running',
      () => job(pipeline),
      (j) => stageOf(j, 'first').state === 'running',
    );
    const drain = await cli('machine', 'drain', 'm1', '--wait', '--interval', '200');
    expect(drain.code, drain.stderr).toBe(0);
    expect(drain.stdout).toMatch(
      /^draining m1: no new work; 1 attempt still there\n(draining m1: 1 attempt left, \d\d:\d\d\n)+m1 is drained: nothing runs there\n$/,
    );
    let j = await job(pipeline);
    expect(stageOf(j, 'first').state, describeJob(j)).toBe('succeeded');
    expect(stageOf(j, 'first').attempts).toHaveLength(1);
    // Again, over several passes: nothing new lands on a drained machine.
    await sleep(1500);
    j = await job(pipeline);
    expect([stageOf(j, 'second').state, stageOf(j, 'second').attempts.length], describeJob(j)).toEqual(['ready', 0]);
    // In the words `gantry machines` uses for it (issue 28: the reason said "draining" of a drained machine).
    expect(stageOf(j, 'second').pendingReason).toBe('no ready machine can run it: 1 drained');
    const listed = await cli('machines', '--json');
    expect((JSON.parse(listed.stdout) as { machines: MachineView[] }).machines.map((m) => [m.name, m.health, m.scheduling])).toEqual([
      ['m1', 'ready', 'drained'],
    ]);

    // A machine in service is not removed: the reason, exit 2.
    await c.startAgent('m2', { cpu: 1 });
    const refused = await cli('machine', 'remove', 'm2');
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^gantry: machine m2 is ready and in service; /);

    // Stop m1's agent, then remove it: gone from the list and the pool; the job still names it.
    await c.killAgent('m1');
    const removed = await cli('machine', 'remove', 'm1');
    expect(removed.code, removed.stderr).toBe(0);
    // Killed a moment ago: still ready, or already suspect (or lost) on a slow, loaded machine.
    expect(removed.stdout).toMatch(/^removed m1 \(it was (ready|suspect|lost)\); jobs that ran there still name it\n$/);
    const after = await cli('machines');
    expect(after.stdout).not.toMatch(/^m1\s/m);
    expect(after.stdout).toMatch(/^m2\s+ready\s/m);
    expect((await api(c.url, '/v1/machines/m1')).status).toBe(404);
    const shown = await cli('status', pipeline);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/first\s+succeeded\s+m1\s/);
    expect((await cli('machine', 'uncordon', 'm1')).code).toBe(4);

    // Its agent comes back: the same machine, back in service; the waiting stage runs there.
    await c.startAgent('m1', m1);
    j = await until(
      'pipeline ends',
      () => job(pipeline),
      (x) => x.state === 'succeeded',
    );
    expect(stageOf(j, 'second').attempts[0]!.machine).toBe('m1');
    expect(stageOf(j, 'first').attempts[0]!.machineId).toBe(stageOf(j, 'second').attempts[0]!.machineId);
  }, 90_000);
});

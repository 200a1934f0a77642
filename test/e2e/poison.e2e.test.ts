import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, isTerminal, jobOf, type RunningGantry, startGantryUp, submit, until } from '../support/gantry-process.js';

/**
 * A stage that kills its own agent (and its shim), every time. `gantry up` restarts the agent, the
 * restarted agent cannot know how the attempt ends and gives it up, the attempt is lost and the stage placed again, until the
 * infrastructure budget (`retry.maxLost`) is spent. Meanwhile other jobs keep moving.
 *
 * Uncontained (`GANTRY_CONTAINMENT=off`, as an agent that is not root runs): a contained stage runs
 * as a uid of its own and cannot signal its agent at all (test/e2e/containment.e2e.test.ts). What
 * is tested here is the budget, for whatever takes an agent down with a stage.
 */
describe('a stage that crashes its agent again and again', () => {
  let g: RunningGantry;
  beforeAll(async () => {
    g = await startGantryUp({
      cluster: 'machines:\n  - { name: cpu-1, cpu: 2, memory: 2Gi }\n  - { name: cpu-2, cpu: 2, memory: 2Gi }\n',
      env: {
        GANTRY_CONTAINMENT: 'off',
        GANTRY_HEARTBEAT_MS: '300',
        GANTRY_SUSPECT_AFTER_MS: '1000',
        GANTRY_LOST_AFTER_MS: '2000',
        GANTRY_LEASE_MS: '2000',
        GANTRY_KILL_GRACE_MS: '500',
      },
    });
    await until(
      'two machines',
      () => api(g.url, '/v1/machines'),
      (r) => r.body.machines?.length === 2,
    );
  });
  afterAll(async () => {
    await g?.stop();
  });

  it('stops after its infrastructure budget, and other jobs are unaffected', async () => {
    const poison = await submit(g.url, {
      name: 'agent-killer',
      retry: { maxAttempts: 3, maxLost: 2 },
      // A stage that takes its machine's agent down with it (the first `node` above it), and the
      // shim it runs under (its parent): the restarted agent finds it still running, but with no
      // way to learn how it ends, so it is lost.
      stages: [
        {
          name: 'boom',
          resources: { cpu: 1, memory: '64Mi' },
          command: [
            'sh',
            '-c',
            'p=$PPID; while [ "$p" -gt 1 ] && [ "$(cat /proc/$p/comm)" != node ]; do read -r _ _ _ p _ < /proc/$p/stat; done; kill -9 $p $PPID; sleep 1',
          ],
        },
      ],
    });
    const healthy = await submit(g.url, {
      name: 'bystander',
      stages: [
        { name: 'a', resources: { cpu: 1, memory: '64Mi' }, command: ['sh', '-c', 'sleep 0.5'] },
        { name: 'b', needs: ['a'], resources: { cpu: 1, memory: '64Mi' }, command: ['true'] },
      ],
    });
    const p = await until('poison job ends', () => jobOf(g.url, poison.body.id), isTerminal, 90_000);
    expect(p.state).toBe('failed');
    const boom = p.stages[0];
    expect(boom.attempts.map((a: { state: string }) => a.state)).toEqual(['lost', 'lost', 'lost']);
    expect(boom.attemptsUsed).toBe(0);
    expect(boom.endReason).toMatch(/lost 3 times, over its infrastructure budget of 2/);
    const h = await until('bystander ends', () => jobOf(g.url, healthy.body.id), isTerminal, 60_000);
    expect(h.state).toBe('succeeded');
    // The agents came back each time: both machines are ready again.
    await until(
      'machines ready',
      () => api(g.url, '/v1/machines'),
      (r) => r.body.machines.every((m: { health: string }) => m.health === 'ready'),
      20_000,
    );
    expect(g.output()).toMatch(/agent cpu-\d exited \(SIGKILL\); restarting it/);
  }, 120_000);
});

import { describe, expect, it } from 'vitest';
import { api, gantryUpForSuite, until } from '../support/gantry-process.js';

/**
 * Preemption with checkpoints (issue 10), end to end with `gantry up`, real agents and real
 * processes: a low-priority preemptible job fills the GPUs; a high-priority job arrives; the low
 * one gets TERM, writes a checkpoint into GANTRY_CHECKPOINT_DIR within its grace, goes back to
 * the queue without using its retry budget, and its next attempt resumes from that checkpoint.
 */
const CLUSTER = 'machines:\n  - { name: gpu-1, cpu: 8, memory: 16Gi, gpus: { type: h100, count: 2 } }\n';

// Counts to 600 in steps of 0.1 s, from where its checkpoint says; on TERM it saves and exits.
const TRAINER = [
  'python3',
  '-c',
  [
    'import os, signal, sys, time',
    'ck = os.path.join(os.environ["GANTRY_CHECKPOINT_DIR"], "step")',
    'step = int(open(ck).read()) if os.path.exists(ck) else 0',
    'def save(*_):',
    '    open(ck + ".tmp", "w").write(str(step)); os.replace(ck + ".tmp", ck)',
    '    print("checkpointed at", step, flush=True); sys.exit(143)',
    'signal.signal(signal.SIGTERM, save)',
    // Printed once the handler is in place: the test preempts only after it has seen this line.
    'print("resumed from", step if os.path.exists(ck) else "nothing", flush=True)',
    'while step < int(os.environ["STEPS"]):',
    '    time.sleep(0.1); step += 1',
    'print("done at", step, flush=True)',
  ].join('\n'),
];

interface StageView {
  name: string;
  state: string;
  attemptsUsed: number;
  attempts: { number: number; state: string; reason: string | null; machine: string; startedAt: number | null }[];
}

describe('preemption with checkpoints', () => {
  const gantry = gantryUpForSuite({ cluster: CLUSTER, machines: 1, env: { GANTRY_PREEMPTION_COOLDOWN_MS: '600000' } });

  const post = (body: unknown) =>
    api(gantry().url, '/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const stagesOf = async (id: string) => (await api(gantry().url, `/v1/jobs/${id}`)).body.stages as StageView[];
  const logOf = async (id: string, attempt: number) => (await api(gantry().url, `/v1/jobs/${id}/stages/train/logs?attempt=${attempt}`)).body;

  it('a high-priority job preempts a low one, which checkpoints, resumes from it, and both succeed', async () => {
    const low = await post({
      name: 'low',
      priority: 10,
      stages: [
        {
          name: 'train',
          resources: { cpu: 2, memory: '1Gi', gpu: { count: 2, type: 'h100' } },
          preemptible: true,
          preemptionGraceSeconds: 10,
          env: { STEPS: '40' },
          command: TRAINER,
        },
      ],
    });
    expect(low.status).toBe(201);
    // Under way for a while, so that its checkpoint holds real progress: its first line says its
    // TERM handler is in place (on a loaded machine python3 may take seconds to get there).
    await until(
      'low running',
      () => stagesOf(low.body.id),
      (st) => st[0]!.attempts[0]?.startedAt != null,
      30_000,
    );
    await until(
      'low handling TERM',
      () => logOf(low.body.id, 1),
      (log) => JSON.stringify(log).includes('resumed from'),
      30_000,
    );
    await new Promise((r) => setTimeout(r, 1500));

    const high = await post({
      name: 'high',
      priority: 900,
      stages: [{ name: 'train', resources: { cpu: 2, memory: '1Gi', gpu: { count: 2, type: 'h100' } }, command: ['sleep', '1'] }],
    });
    expect(high.status).toBe(201);

    const highDone = await until(
      'high succeeded',
      () => stagesOf(high.body.id),
      (st) => st[0]!.state === 'succeeded',
      60_000,
    );
    expect(highDone[0]!.attempts).toHaveLength(1);

    const lowDone = await until(
      'low succeeded',
      () => stagesOf(low.body.id),
      (st) => st[0]!.state === 'succeeded',
      90_000,
    );
    const [first, second] = lowDone[0]!.attempts;
    expect(first!.state).toBe('preempted');
    expect(first!.reason).toContain('priority 900 over 10');
    expect(second!.state).toBe('succeeded');
    // Preempted attempts use no retry budget.
    expect(lowDone[0]!.attemptsUsed).toBe(0);

    // The first attempt wrote its checkpoint on TERM; the second saw it and started from there.
    const firstLog = JSON.stringify(await logOf(low.body.id, 1));
    const saved = /checkpointed at (\d+)/.exec(firstLog);
    expect(saved, firstLog).not.toBeNull();
    expect(Number(saved![1])).toBeGreaterThan(0);
    const secondLog = JSON.stringify(await logOf(low.body.id, 2));
    expect(secondLog).toContain(`resumed from ${saved![1]}`);
    expect(secondLog).toContain('done at 40');
  }, 180_000);
});

import { describe, expect, it } from 'vitest';
import type { AttemptView, JobView, StageView } from '../../api/contract/job-view.js';
import type { CliIo } from './cli-io.js';
import { watchJob } from './watch-job.js';

const T0 = new Date(2024, 0, 1, 12, 0, 0).getTime();

const attempt = (number: number, state: AttemptView['state']): AttemptView => ({
  id: `a${number}`,
  number,
  state,
  machine: 'gpu-1',
  machineId: 'm1',
  gpus: [0, 1],
  gpuType: 'h100',
  exitCode: state === 'failed' ? 7 : null,
  signal: null,
  reason: null,
  pid: 1,
  outputs: null,
  scheduledAt: T0,
  startedAt: T0,
  finishedAt: state === 'running' ? null : T0 + 1000,
});
const train = (state: StageView['state'], attempts: AttemptView[], over: Partial<StageView> = {}): StageView => ({
  name: 'train',
  state,
  pool: 'default',
  needs: [],
  pendingReason: null,
  endReason: null,
  resources: { cpuMillis: 1000, memoryBytes: 1, gpu: { count: 2, types: ['h100'] } },
  attemptsUsed: 0,
  maxAttempts: 3,
  lostUsed: 0,
  outputAttemptId: null,
  readySince: null,
  notBefore: null,
  finishedAt: null,
  attempts,
  ...over,
});
const job = (state: JobView['state'], stage: StageView, over: Partial<JobView> = {}): JobView => ({
  id: 'j_1',
  name: 'resnet-pipeline',
  team: 't',
  priority: 0,
  labels: {},
  state,
  failureReason: null,
  cancelRequestedAt: null,
  createdAt: T0,
  updatedAt: T0,
  finishedAt: null,
  stages: [stage],
  ...over,
});

// Each poll is one second after the last, so the printed times say which poll saw what.
let t = T0;
function scripted(views: JobView[]) {
  t = T0;
  return {
    getJob: async () => {
      t += 1000;
      return views.length > 1 ? views.shift()! : views[0]!;
    },
  };
}

function capture(isTTY: boolean) {
  const out: string[] = [];
  const io: CliIo = { stdout: { write: (s: string) => out.push(s), isTTY, columns: 120 }, stderr: { write: () => true }, color: false, now: () => t };
  return { io, text: () => out.join('') };
}

describe('watchJob', () => {
  it('off a TTY prints one line per stage change, including a retry that lands back in running', async () => {
    const { io, text } = capture(false);
    const views = [
      job('running', train('running', [attempt(1, 'running')])),
      job('running', train('running', [attempt(1, 'running')])),
      job('running', train('running', [attempt(1, 'failed'), attempt(2, 'running')], { attemptsUsed: 1 })),
      job('failed', train('failed', [attempt(1, 'failed'), attempt(2, 'failed')], { attemptsUsed: 2, endReason: 'exit code 7; not retryable' }), {
        failureReason: 'stage train failed: exit code 7; not retryable',
        finishedAt: T0 + 9000,
      }),
    ];
    const r = await watchJob(scripted(views), 'j_1', { io, interval: 1 });
    expect(r).toMatchObject({ interrupted: false, job: { state: 'failed' } });
    expect(text().trimEnd().split('\n')).toEqual([
      '12:00:01 train running on gpu-1 (h100:0,1)',
      '12:00:03 train running on gpu-1 (h100:0,1) [attempt 2]',
      '12:00:04 train failed: exit code 7; not retryable',
      '12:00:04 job resnet-pipeline failed: stage train failed: exit code 7; not retryable',
    ]);
  });

  it('on a TTY redraws a progress line and the stage table', async () => {
    const { io, text } = capture(true);
    const done = job('succeeded', train('succeeded', [attempt(1, 'succeeded')]), { finishedAt: T0 + 12_000 });
    await watchJob(scripted([job('running', train('running', [attempt(1, 'running')])), done]), 'j_1', { io, interval: 1 });
    expect(text()).toContain('resnet-pipeline  running  0/1 stages succeeded  00:01 elapsed');
    expect(text()).toContain('resnet-pipeline  succeeded  1/1 stages succeeded  00:12 elapsed');
    expect(text()).toMatch(/train\s+succeeded\s+gpu-1\s+h100:0,1\s+1\/3/);
  });

  it('with json prints one JobView per change', async () => {
    const { io, text } = capture(false);
    const running = job('running', train('running', [attempt(1, 'running')]));
    await watchJob(scripted([running, running, job('succeeded', train('succeeded', [attempt(1, 'succeeded')]))]), 'j_1', { io, interval: 1, json: true });
    expect(
      text()
        .trimEnd()
        .split('\n')
        .map((l) => (JSON.parse(l) as JobView).state),
    ).toEqual(['running', 'succeeded']);
  });
});

describe('watchJob on the event stream', () => {
  it('reads the job again when its events arrive, not on a timer', async () => {
    const views = [job('running', train('running', [attempt(1, 'running')])), job('succeeded', train('succeeded', [attempt(1, 'succeeded')]))];
    let reads = 0;
    let emit: (() => void) | null = null;
    const client = {
      getJob: async () => {
        reads += 1;
        return views.length > 1 ? views.shift()! : views[0]!;
      },
      followEvents: (_q: unknown, o: { signal: AbortSignal; onEvent: (e: never) => unknown }) =>
        new Promise<void>((resolve) => {
          emit = () => o.onEvent({} as never);
          o.signal.addEventListener('abort', () => resolve(), { once: true });
        }),
    };
    const { io } = capture(false);
    const started = Date.now();
    // A poll interval of a minute: only an event can end this watch in time.
    const watching = watchJob(client, 'j_1', { io, interval: 60_000 });
    await new Promise((r) => setTimeout(r, 50));
    emit!();
    const r = await watching;
    expect(r.job.state).toBe('succeeded');
    expect(reads).toBe(2);
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

import { describe, expect, it } from 'vitest';
import type { AttemptView, JobView, StageView } from '../../api/contract/job-view.js';
import { MAX_ATTEMPT_ROWS, renderAttemptTable } from './attempt-table.js';
import { gpuText, logCutText, usageText } from './attempt-text.js';

const T0 = 1_700_000_000_000;

function attempt(over: Partial<AttemptView>): AttemptView {
  return {
    id: 'a',
    number: 1,
    state: 'succeeded',
    machine: 'cpu-1',
    machineId: 'm1',
    gpus: [],
    gpuType: null,
    exitCode: 0,
    signal: null,
    reason: null,
    endKind: 'exited',
    pid: 10,
    outputs: [],
    scheduledAt: T0,
    startedAt: T0,
    finishedAt: T0 + 5_000,
    memoryPeakBytes: null,
    cpuSeconds: null,
    ...over,
  };
}

function stage(name: string, attempts: AttemptView[], over: Partial<StageView> = {}): StageView {
  return {
    name,
    state: 'succeeded',
    pool: 'cpu',
    needs: [],
    pendingReason: null,
    endReason: null,
    resources: { cpuMillis: 1000, memoryBytes: 64 * 2 ** 20, gpu: null },
    attemptsUsed: attempts.length,
    maxAttempts: 3,
    lostUsed: 0,
    outputAttemptId: null,
    readySince: null,
    notBefore: null,
    finishedAt: null,
    attempts,
    ...over,
  };
}

const job = (stages: StageView[]): JobView => ({
  id: 'j_1',
  name: 'j',
  team: 'default',
  priority: 50,
  labels: {},
  state: 'running',
  failureReason: null,
  cancelRequestedAt: null,
  createdAt: T0,
  updatedAt: T0,
  finishedAt: null,
  stages,
});

const OOM =
  'killed by its memory limit: peak 64.0 MiB of a 64.0 MiB limit (resources.memory 64Mi); raise resources.memory, or set limits.memory above it, to let it use more';

describe('gpuText', () => {
  it('names the type and devices, and a share as its part of its GPU', () => {
    expect(gpuText(attempt({}))).toBe('-');
    expect(gpuText(attempt({ gpus: [0, 1], gpuType: 'h100' }))).toBe('h100:0,1');
    expect(gpuText(attempt({ gpus: [2], gpuType: 'h100', gpuShare: { milli: 250, memoryBytes: null } }))).toBe('0.25 of h100:2');
  });
});

describe('usageText', () => {
  it('says what is known of the peak and the CPU time, and "-" when nothing is', () => {
    expect(usageText(attempt({ memoryPeakBytes: 212 * 2 ** 20, cpuSeconds: 3.14 }))).toBe('peak 212.0 MiB, 3.1 CPU s');
    expect(usageText(attempt({ memoryPeakBytes: 1536, cpuSeconds: null }))).toBe('peak 1.5 KiB');
    expect(usageText(attempt({ cpuSeconds: 0 }))).toBe('0.0 CPU s');
    expect(usageText(attempt({}))).toBe('-');
    // An older server sends neither field.
    expect(usageText({})).toBe('-');
  });
});

describe('logCutText', () => {
  it('says how much of a log was dropped between its head and its tail, and nothing for a whole log', () => {
    expect(logCutText({ logCutBytes: 36 * 2 ** 20 })).toBe('log cut: 36.0 MiB dropped');
    expect(logCutText({ logCutBytes: 0 })).toBe('');
    expect(logCutText({ logCutBytes: null })).toBe('');
    // An older server sends no such field.
    expect(logCutText({})).toBe('');
  });
});

describe('renderAttemptTable', () => {
  it("says each gang member's rank beside the attempt's number it shares, on its own machine", () => {
    const members = [0, 1].map((r) => attempt({ id: `g${r}`, machine: `gpu-${r + 1}`, gangRank: r, gangSize: 2 }));
    const lines = renderAttemptTable(job([stage('train', members)]), T0 + 30_000, { color: false }).split('\n');
    expect(lines[1]).toMatch(/^train\s+1 rank 0\s+succeeded\s+gpu-1\s+exit 0/);
    expect(lines[2]).toMatch(/^train\s+1 rank 1\s+succeeded\s+gpu-2\s+exit 0/);
  });

  it("says in an attempt's detail that its log was cut, after how it ended", () => {
    const text = renderAttemptTable(
      job([
        stage('train', [attempt({ state: 'failed', exitCode: 1, reason: 'exit code 1', logCutBytes: 36 * 2 ** 20 })], { state: 'failed' }),
        stage('eval', [attempt({ id: 'a3', logCutBytes: 2048 })]),
      ]),
      T0 + 30_000,
      { color: false },
    );
    const lines = text.split('\n');
    expect(lines[1]).toMatch(/^train\s+1\s+failed\s+.*exit code 1; log cut: 36\.0 MiB dropped$/);
    expect(lines[2]).toMatch(/^eval\s+1\s+succeeded\s+.*\s+log cut: 2\.0 KiB dropped$/);
  });

  it("lists every attempt in stage order: how it ended, how long it ran, what it used, and an oom-killed end's detail in full", () => {
    const text = renderAttemptTable(
      job([
        stage('prep', [attempt({ memoryPeakBytes: 3 * 2 ** 20, cpuSeconds: 1.25 })]),
        stage(
          'train',
          [
            attempt({
              id: 'a2',
              number: 2,
              state: 'running',
              exitCode: null,
              endKind: null,
              startedAt: T0 + 20_000,
              finishedAt: null,
            }),
            attempt({
              id: 'a1',
              state: 'failed',
              machine: 'gpu-1',
              exitCode: null,
              signal: 'SIGKILL',
              endKind: 'oom-killed',
              reason: OOM,
              finishedAt: T0 + 10_000,
              memoryPeakBytes: 64 * 2 ** 20,
              cpuSeconds: 0.4,
            }),
          ],
          { state: 'running' },
        ),
        stage('eval', [], { state: 'pending' }),
      ]),
      T0 + 30_000,
      { color: false },
    );
    const lines = text.split('\n');
    expect(lines[0]).toMatch(/^STAGE\s+#\s+STATE\s+MACHINE\s+END\s+RAN\s+USAGE\s+DETAIL$/);
    expect(lines[1]).toMatch(/^prep\s+1\s+succeeded\s+cpu-1\s+exit 0\s+00:05\s+peak 3\.0 MiB, 1\.3 CPU s$/);
    expect(lines[2]).toBe(`train  1  failed     gpu-1    oom-killed  00:10  peak 64.0 MiB, 0.4 CPU s  ${OOM}`);
    expect(lines[3]).toMatch(/^train\s+2\s+running\s+cpu-1\s+-\s+00:10\s+-$/);
    expect(lines).toHaveLength(4);
  });

  it('says a signal, a timeout or a loss in the END column', () => {
    const text = renderAttemptTable(
      job([
        stage('s', [
          attempt({ number: 1, state: 'failed', exitCode: null, signal: 'SIGSEGV', endKind: 'signaled' }),
          attempt({ number: 2, state: 'failed', exitCode: null, signal: 'SIGTERM', endKind: 'timeout', reason: 'timeout after 60 s' }),
          attempt({ number: 3, state: 'lost', exitCode: null, endKind: 'lost', reason: 'machine cpu-1 lost' }),
          attempt({ number: 4, state: 'failed', exitCode: 3, endKind: 'exited' }),
        ]),
      ]),
      T0,
      { color: false },
    );
    expect(
      text
        .split('\n')
        .slice(1)
        .map((l) => l.split(/\s{2,}/)[4]),
    ).toEqual(['SIGSEGV', 'timeout', 'lost', 'exit 3']);
  });

  it('is empty when nothing ran, and leaves succeeded attempts out first when there are many, saying how many', () => {
    expect(renderAttemptTable(job([stage('a', [], { state: 'ready' })]), T0, { color: false })).toBe('');
    const many = Array.from({ length: MAX_ATTEMPT_ROWS + 10 }, (_, i) => stage(`s${i}`, [attempt({ id: `a${i}` })]));
    many[7] = stage('s7', [attempt({ state: 'failed', exitCode: 1 })], { state: 'failed' });
    const lines = renderAttemptTable(job(many), T0, { color: false }).split('\n');
    expect(lines.slice(1, -1).map((l) => l.split(/\s+/)[0])).toEqual(['s7']);
    expect(lines.at(-1)).toBe(`(${MAX_ATTEMPT_ROWS + 9} more attempts not shown, succeeded ones first; --json has every attempt)`);
    const failing = Array.from({ length: MAX_ATTEMPT_ROWS + 2 }, (_, i) => stage(`f${i}`, [attempt({ state: 'failed', exitCode: 1 })]));
    const capped = renderAttemptTable(job(failing), T0, { color: false }).split('\n');
    expect(capped).toHaveLength(MAX_ATTEMPT_ROWS + 2);
    expect(capped.at(-1)).toBe('(2 more attempts not shown, succeeded ones first; --json has every attempt)');
  });
});

import { describe, expect, it } from 'vitest';
import type { StageView } from '../../api/contract/job-view';
import { DEFAULT_SIZES } from './dag-layout';
import { boxChars, boxText, boxTitle, boxWidth, clip } from './dag-text';

const stage = (over: Partial<StageView>): StageView =>
  ({
    name: 's',
    state: 'pending',
    pool: 'cpu',
    needs: [],
    pendingReason: null,
    endReason: null,
    resources: { cpuMillis: 1000, memoryBytes: 512 * 1024 ** 2, gpu: null },
    attemptsUsed: 0,
    maxAttempts: 3,
    lostUsed: 0,
    attempts: [],
    ...over,
  }) as StageView;

describe('a DAG box says what it can, sized to its text, and its title says the rest', () => {
  const report = stage({ name: 'report', needs: ['eval-mmlu', 'eval-hellaswag'] });

  it('short texts keep the default box', () => {
    expect(boxWidth([stage({ name: 'prep' })])).toBe(DEFAULT_SIZES.nodeWidth);
  });

  it('a box grows to fit "needs eval-mmlu, eval-hellaswag" (cut at 184 px: "needs eval-mmlu,…"), and the line then fits uncut', () => {
    const w = boxWidth([report]);
    expect(w).toBeGreaterThan(DEFAULT_SIZES.nodeWidth);
    expect(w).toBeLessThanOrEqual(320);
    const t = boxText(report);
    expect(t.detail).toBe('needs eval-mmlu, eval-hellaswag');
    expect(clip(t.detail, boxChars(DEFAULT_SIZES.nodeWidth, false).line - t.state.length - 3)).toMatch(/…$/);
    expect(clip(t.detail, boxChars(w, false).line - t.state.length - 3)).toBe(t.detail);
  });

  it('past the limit the line is cut with an ellipsis, and the title has every word', () => {
    const many = stage({ name: 'report', needs: Array.from({ length: 12 }, (_, i) => `eval-benchmark-${i}`) });
    const w = boxWidth([many]);
    expect(w).toBe(320);
    const t = boxText(many);
    const shown = clip(t.detail, boxChars(w, false).line - t.state.length - 3);
    expect(shown.endsWith('…')).toBe(true);
    expect(boxTitle(many)).toContain(t.detail);
    expect(boxTitle(many)).toContain('eval-benchmark-11');
  });

  it("the title carries the waiting reason when the box's line is something else", () => {
    const ready = stage({ name: 'train', state: 'ready', pendingReason: 'no machine with 8 free h100 GPUs: 2 of 2 matching machines busy' });
    expect(boxTitle(ready).split('\n')).toEqual(['train: ready · no machine with 8 free h100 GPUs: 2 of 2 matching machines busy', '1 CPU · 512 MiB']);
    const failed = stage({ name: 'x', state: 'failed', endReason: 'exit 3' });
    expect(boxTitle(failed).split('\n')).toEqual(['x: failed · exit 3', '1 CPU · 512 MiB']);
  });

  it("a running gang's line names every member's machine, rank 0 first", () => {
    const member = (rank: number) => ({
      rank,
      attemptId: `a${rank}`,
      state: 'running' as const,
      machine: `gpu-${rank + 1}`,
      machineId: `m${rank}`,
      gpus: [0],
      gpuType: 'h100',
    });
    const ddp = stage({ name: 'train', state: 'running', members: [0, 1, 2].map(member) });
    expect(boxText(ddp).detail).toBe('gang of 3 · gpu-1, gpu-2, gpu-3');
  });
});

/**
 * The retry table at the advancer (issue 26): an end of each kind is retried, failed for good, or
 * requeued as the table says, and never by the wording of its detail. The expectations are written
 * out here, not read from attemptEndPolicy, so that a change to the table is a change to this test.
 */
import { describe, expect, it } from 'vitest';
import { type AttemptEndKind, attemptEndKinds } from '../domain/attempt-end.js';
import { DEFAULT_RETRY, type RetryPolicy } from '../domain/job-definition.js';
import { advance, type AttemptOutcome, type StageNode } from './advance.js';

const NOW = 1_000_000;

/** What should become of a running stage with budget left, after an attempt that ended so. */
const EXPECTED: Record<AttemptEndKind, { to: 'ready' | 'failed'; attemptsUsed: number; lostUsed: number }> = {
  exited: { to: 'ready', attemptsUsed: 1, lostUsed: 0 },
  signaled: { to: 'ready', attemptsUsed: 1, lostUsed: 0 },
  timeout: { to: 'ready', attemptsUsed: 1, lostUsed: 0 },
  'spawn-failed': { to: 'failed', attemptsUsed: 1, lostUsed: 0 },
  'inputs-failed': { to: 'ready', attemptsUsed: 1, lostUsed: 0 },
  'outputs-failed': { to: 'ready', attemptsUsed: 1, lostUsed: 0 },
  killed: { to: 'ready', attemptsUsed: 1, lostUsed: 0 },
  'oom-killed': { to: 'ready', attemptsUsed: 1, lostUsed: 0 },
  lost: { to: 'ready', attemptsUsed: 0, lostUsed: 1 },
  preempted: { to: 'ready', attemptsUsed: 0, lostUsed: 0 },
};

function stage(retry: Partial<RetryPolicy> = {}): StageNode {
  return { name: 'a', state: 'running', needs: [], attemptsUsed: 0, lostUsed: 0, retry: { ...DEFAULT_RETRY, ...retry } };
}

/** An agent's outcome of this kind (lost and preempted too: the table decides, whoever reports it). */
const failed = (end: AttemptEndKind, detail: string | null = null, exitCode: number | null = 1): AttemptOutcome => ({
  kind: 'failed',
  end,
  exitCode,
  signal: null,
  detail,
});

function after(outcome: AttemptOutcome, retry: Partial<RetryPolicy> = {}) {
  const [c] = advance([stage(retry)], { stage: 'a', outcome }, NOW, 0.5);
  return { to: c!.to, attemptsUsed: c!.attemptsUsed ?? 0, lostUsed: c!.lostUsed ?? 0 };
}

describe('an attempt end of each kind is retried or not per the table', () => {
  it('covers every kind', () => {
    expect(Object.keys(EXPECTED).sort()).toEqual([...attemptEndKinds].sort());
  });

  for (const kind of attemptEndKinds) {
    it(`${kind}: ${EXPECTED[kind].to === 'failed' ? 'fails the stage for good' : 'goes back to the queue'}`, () => {
      expect(after(failed(kind))).toEqual(EXPECTED[kind]);
    });
  }

  it("the control plane's own lost and preempted ends go by the same table", () => {
    expect(after({ kind: 'lost', reason: 'machine m1 lost' })).toEqual(EXPECTED.lost);
    expect(after({ kind: 'preempted', reason: 'preempted', notBefore: NOW + 30_000 })).toEqual(EXPECTED.preempted);
  });

  it('decides by the kind, never the words: a spawn failure is final whatever its detail, a timeout retried whatever its', () => {
    expect(after(failed('spawn-failed', 'timeout after 5 s')).to).toBe('failed');
    expect(after(failed('timeout', 'spawn failed: ENOENT')).to).toBe('ready');
    expect(after(failed('exited', 'spawn failed: ENOENT')).to).toBe('ready');
  });

  it('onExitCodes narrows plain exits with a code only', () => {
    const only42 = { onExitCodes: [42] };
    expect(after(failed('exited', null, 42), only42).to).toBe('ready');
    expect(after(failed('exited', null, 1), only42).to).toBe('failed');
    // Not a plain exit: retried as the kind says, whatever codes the policy names.
    expect(after(failed('timeout', 'timeout after 5 s', null), only42).to).toBe('ready');
    expect(after(failed('signaled', null, null), only42).to).toBe('ready');
  });

  it('a retried kind still spends the budget: the last attempt fails the stage', () => {
    for (const kind of attemptEndKinds.filter((k) => EXPECTED[k].attemptsUsed === 1)) {
      const [c] = advance([{ ...stage({ maxAttempts: 2 }), attemptsUsed: 1 }], { stage: 'a', outcome: failed(kind) }, NOW, 0.5);
      expect(c).toMatchObject({ to: 'failed', attemptsUsed: 2 });
    }
  });
});

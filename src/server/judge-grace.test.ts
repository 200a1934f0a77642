import { describe, expect, it } from 'vitest';
import { JudgeGrace } from './judge-grace.js';

describe('JudgeGrace', () => {
  it('a gain after judging has gone on a loss period starts a grace of one loss period', () => {
    const g = new JudgeGrace(1000, 0);
    expect(g.judgeFrom).toBe(1000);
    g.gained(5000);
    expect(g.judgeFrom).toBe(6000);
  });

  it('a gain during a grace extends it, to at most twice the loss period from its beginning', () => {
    const g = new JudgeGrace(1000, 0);
    g.gained(400);
    expect(g.judgeFrom).toBe(1400);
    g.gained(1200);
    expect(g.judgeFrom).toBe(2000);
    g.gained(1900);
    expect(g.judgeFrom).toBe(2000);
  });

  /** Gains every `every` ms for a minute with a loss period of 1 s: the time judged, and the longest stretch not judged. */
  const churn = (every: number) => {
    const g = new JudgeGrace(1000, 0);
    let judged = 0;
    let lastJudged = 0;
    let longest = 0;
    for (let t = 0; t <= 60_000; t += 100) {
      if (t % every === 0) g.gained(t);
      if (t >= g.judgeFrom) {
        judged += 100;
        lastJudged = t;
      }
      longest = Math.max(longest, t - lastJudged);
    }
    return { judged, longest };
  };

  it('gains more often than the loss period leave judging on at least a third of the time, never off for more than twice it (found in review: the grace pushed forward for ever)', () => {
    for (const every of [100, 300, 400, 700]) {
      const { judged, longest } = churn(every);
      expect(judged).toBeGreaterThanOrEqual(60_000 / 3);
      expect(longest).toBeLessThanOrEqual(2000);
    }
  });

  it('a gain less than a loss period into judging starts no grace; a restart always does', () => {
    const g = new JudgeGrace(1000, 0);
    g.gained(1500);
    expect(g.judgeFrom).toBe(1000);
    g.restart(1600);
    expect(g.judgeFrom).toBe(2600);
  });
});

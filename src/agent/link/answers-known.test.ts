import { describe, expect, it } from 'vitest';
import { AnswersKnown } from './answers-known.js';

describe('AnswersKnown', () => {
  it('knows nothing before the first request, and 0 while only requests sent before any answer are out', () => {
    const k = new AnswersKnown();
    expect(k.knownAsOf).toBeNull();
    const r = k.sent();
    expect(k.knownAsOf).toBe(0);
    k.settled(r, 100);
    expect(k.knownAsOf).toBe(100);
  });

  it('is the newest answer acted on, held back to what was known when each unanswered request left', () => {
    const k = new AnswersKnown();
    k.settled(k.sent(), 100);
    const slow = k.sent(); // left knowing 100
    const fast = k.sent();
    k.settled(fast, 300);
    // The slow one's answer may carry work started after 100 and before 300.
    expect(k.knownAsOf).toBe(100);
    k.settled(slow, 200);
    expect(k.knownAsOf).toBe(300);
  });

  it('a failed request (no asOf) stops holding it back and moves nothing forward', () => {
    const k = new AnswersKnown();
    k.settled(k.sent(), 100);
    const failed = k.sent();
    k.settled(k.sent(), 400);
    expect(k.knownAsOf).toBe(100);
    k.settled(failed);
    expect(k.knownAsOf).toBe(400);
  });

  it('an older answer arriving late does not move it back', () => {
    const k = new AnswersKnown();
    const a = k.sent();
    const b = k.sent();
    k.settled(b, 500);
    k.settled(a, 200);
    expect(k.knownAsOf).toBe(500);
  });
});

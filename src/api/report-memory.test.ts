import { describe, expect, it } from 'vitest';
import { ReportMemory } from './report-memory.js';

describe('ReportMemory', () => {
  it('leaves out of a heartbeat only the assignments offered after it arrived, per machine', () => {
    const m = new ReportMemory(4000);
    m.offered('m1', ['a'], 1000);
    const arrived = m.mark();
    expect(m.offeredSince('m1', arrived)).toEqual([]);
    m.offered('m1', ['b', 'c'], 1100);
    m.offered('m2', ['x'], 1100);
    expect(m.offeredSince('m1', arrived)).toEqual(['b', 'c']);
    expect(m.offeredSince('m2', arrived)).toEqual(['x']);
    // Offered again after the heartbeat arrived: left out of it too.
    m.offered('m1', ['a'], 1200);
    expect(m.offeredSince('m1', arrived).sort()).toEqual(['a', 'b', 'c']);
    expect(m.offeredSince('m3', arrived)).toEqual([]);
  });

  it('remembers outcomes whatever the mark, and forgets both after keepMs', () => {
    const m = new ReportMemory(4000);
    m.ended('m1', ['a'], 1000);
    m.offered('m1', ['b'], 1000);
    const before = m.mark() - 1;
    expect(m.hasEnded('m1', 'a')).toBe(true);
    expect(m.hasEnded('m1', 'b')).toBe(false);
    expect(m.hasEnded('m2', 'a')).toBe(false);
    // A later write forgets what is older than keepMs, oldest first, and keeps the rest.
    m.ended('m1', ['c'], 4500);
    expect(m.hasEnded('m1', 'a')).toBe(true);
    m.ended('m1', ['d'], 5001);
    expect(m.hasEnded('m1', 'a')).toBe(false);
    expect(m.hasEnded('m1', 'c')).toBe(true);
    expect(m.offeredSince('m1', before)).toEqual([]);
  });

  it('a heartbeat is no evidence against an attempt started at placement offered after it arrived, or within the grace before', () => {
    const m = new ReportMemory(10_000);
    // Offered before the heartbeat arrived, long enough before: evidence. `p` was not started: never spared.
    m.offered('m1', ['old', 'p'], 1000, new Set(['old']));
    const arrived = m.mark();
    // Offered after it arrived (its store call ran late): the agent may not have had it when it sent it.
    m.offered('m1', ['late'], 5000, new Set(['late']));
    m.offered('m2', ['other'], 5000, new Set(['other']));
    expect(m.notEvidence('m1', arrived, 4000)).toEqual(['late']);
    // The same heartbeat judged with a grace that reaches back past the first offer: that one too.
    expect(m.notEvidence('m1', arrived, 999).sort()).toEqual(['late', 'old']);
    // A heartbeat that arrived after both, past the grace of each: evidence against both.
    expect(m.notEvidence('m1', m.mark(), 6000)).toEqual([]);
    expect(m.notEvidence('m3', arrived, 0)).toEqual([]);
  });
});

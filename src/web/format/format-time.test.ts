import { describe, expect, it } from 'vitest';
import { formatAbsolute, formatDuration, formatRelative } from './format-time';

describe('format-time', () => {
  it('durations in at most two units', () => {
    expect(formatDuration(-5)).toBe('0 ms');
    expect(formatDuration(850)).toBe('850 ms');
    expect(formatDuration(12_400)).toBe('12 s');
    expect(formatDuration(185_000)).toBe('3 min 05 s');
    expect(formatDuration(2 * 3_600_000 + 3 * 60_000 + 59_000)).toBe('2 h 03 min');
    expect(formatDuration(3 * 86_400_000 + 4 * 3_600_000 + 1)).toBe('3 d 4 h');
  });

  it('relative times, past and future', () => {
    const now = 1_800_000_000_000;
    expect(formatRelative(now - 2000, now)).toBe('just now');
    expect(formatRelative(now - 12_000, now)).toBe('12 s ago');
    expect(formatRelative(now - 3 * 60_000 - 59_000, now)).toBe('3 min ago');
    expect(formatRelative(now - 2 * 3_600_000, now)).toBe('2 h ago');
    expect(formatRelative(now - 5 * 86_400_000, now)).toBe('5 d ago');
    expect(formatRelative(now + 30_000, now)).toBe('in 30 s');
  });

  it('absolute times to the second', () => {
    expect(formatAbsolute(new Date(2026, 11, 2, 14, 3, 9).getTime())).toBe('2026-12-02 14:03:09');
  });
});

import { describe, expect, it } from 'vitest';
import { formatBytes, formatCpu, formatShare } from './format-quantity';

describe('format-quantity', () => {
  it('CPUs as the spec writes them', () => {
    expect(formatCpu(4000)).toBe('4');
    expect(formatCpu(500)).toBe('500m');
    expect(formatCpu(1500)).toBe('1.5');
  });
  it('memory in binary units', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(2 ** 29)).toBe('512 MiB');
    expect(formatBytes(1.5 * 2 ** 30)).toBe('1.5 GiB');
    expect(formatBytes(16 * 2 ** 30)).toBe('16 GiB');
  });
  it('shares', () => {
    expect(formatShare(1, 3)).toBe('33%');
    expect(formatShare(0, 0)).toBe('–');
  });
});

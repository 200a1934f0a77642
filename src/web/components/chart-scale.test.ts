import { describe, expect, it } from 'vitest';
import { linePath, niceCeil } from './chart-scale';

describe('chart scale', () => {
  it('rounds the top up to 1, 2, 2.5 or 5 times a power of ten', () => {
    expect(niceCeil(0)).toBe(1);
    expect(niceCeil(3)).toBe(5);
    expect(niceCeil(7)).toBe(10);
    expect(niceCeil(21)).toBe(25);
    expect(niceCeil(180)).toBe(200);
    expect(niceCeil(0.3, 0.1)).toBe(0.5);
    expect(niceCeil(100)).toBe(100);
  });

  it('draws points left to right, zero at the bottom, breaking at a missing value', () => {
    const box = { t0: 0, t1: 100, top: 10, width: 200, height: 50 };
    expect(
      linePath(
        [
          { t: 0, v: 0 },
          { t: 50, v: 10 },
          { t: 75, v: null },
          { t: 100, v: 5 },
        ],
        box,
      ),
    ).toBe('M 0.0 50.0 L 100.0 0.0 M 200.0 25.0');
  });
});

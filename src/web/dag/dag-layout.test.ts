import { describe, expect, it } from 'vitest';
import { crossings, dagLayers, DEFAULT_SIZES, layoutDag } from './dag-layout';

const s = (name: string, ...needs: string[]) => ({ name, needs });

describe('dag layout', () => {
  it('puts each stage one layer right of its deepest need', () => {
    const layers = dagLayers([s('eval', 'train', 'prep'), s('prep'), s('train', 'prep'), s('report', 'eval')]);
    expect(Object.fromEntries(layers)).toEqual({ prep: 0, train: 1, eval: 2, report: 3 });
  });

  it('points every edge right, from the side of one box to the side of the next', () => {
    const l = layoutDag([s('a'), s('b', 'a'), s('c', 'a'), s('d', 'b', 'c')]);
    const box = new Map(l.boxes.map((b) => [b.name, b]));
    for (const e of l.edges) {
      expect(box.get(e.to)!.x).toBeGreaterThan(box.get(e.from)!.x);
      expect(e.path).toMatch(new RegExp(`^M ${box.get(e.from)!.x + DEFAULT_SIZES.nodeWidth} `));
    }
    expect(l.edges.map((e) => `${e.from}>${e.to}`).sort()).toEqual(['a>b', 'a>c', 'b>d', 'c>d']);
  });

  it('never puts two boxes on one another, and fits them all in its size', () => {
    const stages = [
      s('r1'),
      s('r2'),
      s('r3'),
      ...Array.from({ length: 12 }, (_, i) => s(`m${i}`, `r${(i % 3) + 1}`)),
      s('join', ...Array.from({ length: 12 }, (_, i) => `m${i}`)),
    ];
    const l = layoutDag(stages);
    const { nodeWidth: w, nodeHeight: h } = DEFAULT_SIZES;
    for (const a of l.boxes) {
      expect(a.x + w).toBeLessThanOrEqual(l.width);
      expect(a.y + h).toBeLessThanOrEqual(l.height);
      for (const b of l.boxes) if (a !== b) expect(a.x + w <= b.x || b.x + w <= a.x || a.y + h <= b.y || b.y + h <= a.y).toBe(true);
    }
  });

  it('orders a layer to uncross edges that the spec order would cross', () => {
    // In spec order, x1 (under a) and y1 (under b) sit in the wrong rows: every edge crosses.
    const stages = [s('a'), s('b'), s('y1', 'b'), s('x1', 'a'), s('y2', 'y1'), s('x2', 'x1')];
    const l = layoutDag(stages);
    expect(crossings(l)).toBe(0);
    const row = (n: string) => l.boxes.find((b) => b.name === n)!.row;
    expect(row('x1')).toBe(row('a'));
    expect(row('y2')).toBe(row('b'));
  });

  it('ignores needs it does not know and survives a cycle (which the API refuses anyway)', () => {
    const l = layoutDag([s('a', 'ghost'), s('b', 'c'), s('c', 'b')]);
    expect(l.boxes).toHaveLength(3);
    expect(l.edges.map((e) => `${e.from}>${e.to}`).sort()).toEqual(['b>c', 'c>b']);
  });

  it('an empty job is an empty drawing', () => {
    expect(layoutDag([])).toEqual({ boxes: [], edges: [], width: 0, height: 0 });
  });
});

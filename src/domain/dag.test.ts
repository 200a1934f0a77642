import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { findCycle, topologicalOrder, type Edge } from './dag.js';

/** A random DAG: nodes in a shuffled order, edges only from a lower to a higher index. */
const dagArb = fc.integer({ min: 2, max: 30 }).chain((n) => {
  const names = Array.from({ length: n }, (_, i) => `s${i}`);
  const edge = fc.tuple(fc.nat(), fc.nat()).map(([a, b]): Edge => {
    const lo = a % (n - 1);
    const hi = lo + 1 + (b % (n - 1 - lo));
    return [names[lo]!, names[hi]!];
  });
  return fc.record({
    nodes: fc.shuffledSubarray(names, { minLength: n, maxLength: n }),
    edges: fc.array(edge, { minLength: 1, maxLength: 80 }),
  });
});

function isClosedPathOf(cycle: string[], edges: readonly Edge[]): boolean {
  const set = new Set(edges.map(([a, b]) => `${a}\u0000${b}`));
  if (cycle.length < 2 || cycle[0] !== cycle[cycle.length - 1]) return false;
  for (let i = 0; i + 1 < cycle.length; i++) if (!set.has(`${cycle[i]}\u0000${cycle[i + 1]}`)) return false;
  return true;
}

describe('findCycle / topologicalOrder', () => {
  it('finds no cycle in a random DAG, and orders every node after its predecessors', () => {
    fc.assert(
      fc.property(dagArb, ({ nodes, edges }) => {
        expect(findCycle(nodes, edges)).toBeNull();
        const order = topologicalOrder(nodes, edges);
        expect(order).not.toBeNull();
        expect([...order!].sort()).toEqual([...nodes].sort());
        const pos = new Map(order!.map((n, i) => [n, i]));
        for (const [a, b] of edges) expect(pos.get(a)!).toBeLessThan(pos.get(b)!);
      }),
    );
  });

  it('detects the cycle a back edge creates', () => {
    fc.assert(
      fc.property(dagArb, fc.nat(), ({ nodes, edges }, pick) => {
        const [a, b] = edges[pick % edges.length]!;
        const withBack: Edge[] = [...edges, [b, a]];
        const cycle = findCycle(nodes, withBack);
        expect(cycle).not.toBeNull();
        expect(isClosedPathOf(cycle!, withBack)).toBe(true);
        expect(new Set(cycle!.slice(1)).size).toBe(cycle!.length - 1); // a simple cycle
        expect(topologicalOrder(nodes, withBack)).toBeNull();
      }),
    );
  });

  it('names a cycle from its earliest node, in edge order', () => {
    // a before b before c before a
    expect(
      findCycle(
        ['x', 'a', 'b', 'c'],
        [
          ['c', 'a'],
          ['b', 'c'],
          ['a', 'b'],
          ['x', 'a'],
        ],
      ),
    ).toEqual(['a', 'b', 'c', 'a']);
    expect(
      findCycle(
        ['c', 'b', 'a'],
        [
          ['a', 'b'],
          ['b', 'c'],
          ['c', 'a'],
        ],
      ),
    ).toEqual(['c', 'a', 'b', 'c']);
  });

  it('treats a self edge as a cycle and ignores edges to unknown nodes', () => {
    expect(findCycle(['a'], [['a', 'a']])).toEqual(['a', 'a']);
    expect(
      findCycle(
        ['a', 'b'],
        [
          ['a', 'zz'],
          ['zz', 'a'],
        ],
      ),
    ).toBeNull();
  });

  it('keeps spec order among stages that are free at the same time', () => {
    expect(topologicalOrder(['d', 'c', 'b', 'a'], [['a', 'b']])).toEqual(['d', 'c', 'a', 'b']);
    expect(
      topologicalOrder(
        ['train', 'prep', 'eval'],
        [
          ['prep', 'train'],
          ['train', 'eval'],
        ],
      ),
    ).toEqual(['prep', 'train', 'eval']);
  });

  it('handles a long chain without deep recursion', () => {
    const nodes = Array.from({ length: 20_000 }, (_, i) => `n${i}`);
    const edges: Edge[] = nodes.slice(1).map((n, i) => [nodes[i]!, n]);
    expect(findCycle(nodes, edges)).toBeNull();
    expect(topologicalOrder(nodes, edges)).toEqual(nodes);
    expect(findCycle(nodes, [...edges, [nodes[nodes.length - 1]!, nodes[0]!]])).toHaveLength(nodes.length + 1);
  });
});

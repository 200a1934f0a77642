import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChoiceTree } from './choice-tree.js';
import { compareScores, type ShareScore } from './share-policies.js';

/** The scan ChoiceTree stands for: the first slot of the lowest score among those with one and not left out. */
function scanBest(slots: readonly number[], scores: Map<number, ShareScore | null>, out: ReadonlySet<number>): number {
  let best = -1;
  for (const s of slots) {
    const c = scores.get(s) ?? null;
    if (c === null || out.has(s)) continue;
    if (best < 0 || compareScores(c, scores.get(best)!) < 0) best = s;
  }
  return best;
}

const scoreArb = fc.option(fc.tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 2 })), { nil: null });

describe('ChoiceTree', () => {
  it('answers as a scan in slot order, through changed scores, exclusions and inclusions', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 0, max: 40 }), { maxLength: 20 }).map((xs) => xs.sort((a, b) => a - b)),
        fc.array(fc.tuple(fc.constantFrom('score', 'exclude', 'include', 'best'), fc.nat(), scoreArb), { maxLength: 40 }),
        scoreArb,
        (slots, steps, first) => {
          const scores = new Map<number, ShareScore | null>(slots.map((s) => [s, first]));
          const out = new Set<number>();
          const tree = new ChoiceTree(Int32Array.from(slots), (s) => scores.get(s) ?? null);
          expect(tree.best()).toBe(scanBest(slots, scores, out));
          for (const [op, k, score] of steps) {
            const slot = slots.length ? slots[k % slots.length]! : k;
            if (op === 'score') {
              if (slots.includes(slot)) scores.set(slot, score);
              tree.forget(slot);
            } else if (op === 'exclude' && slots.includes(slot)) {
              out.add(slot);
              tree.exclude(slot);
            } else if (op === 'include' && slots.includes(slot)) {
              out.delete(slot);
              tree.include(slot);
            }
            expect(tree.best()).toBe(scanBest(slots, scores, out));
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

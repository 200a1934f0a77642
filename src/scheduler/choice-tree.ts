import { compareScores, type ShareScore } from './share-policies.js';

/**
 * The best of n scored slots (lowest score; among equal scores the lowest index), kept under
 * changes: a tournament tree over the slots, whose leaves are read lazily through `scoreOf` and
 * forgotten by `forget`. A change costs its path to the root, and the next `best` recomputes only
 * the paths changed since; so a pass that places on one machine at a time finds the next best
 * machine in O(log n) rather than a scan of every machine (docs/throughput.md, "Placement at
 * scale"). The answer is the scan's: the first index of the lowest score.
 */
export class ChoiceTree {
  /** Leaves from `size` on; each node holds the index of its subtree's best slot, or -1 when none has a score. */
  private readonly winner: Int32Array;
  /** Nodes to recombine; a stale node's ancestors are all stale too. */
  private readonly stale: Uint8Array;
  private readonly scores: (ShareScore | null)[];
  /** 1 when the slot's score in `scores` is current. */
  private readonly known: Uint8Array;
  /** Slots left out of `best` for now (`exclude`), until `include`. */
  private readonly excluded: Uint8Array;
  private readonly size: number;

  constructor(
    private readonly n: number,
    /** A slot's score, or null when it has none (does not fit, not eligible). Asked again only after `forget`. */
    private readonly scoreOf: (i: number) => ShareScore | null,
  ) {
    let size = 1;
    while (size < n) size *= 2;
    this.size = size;
    this.winner = new Int32Array(2 * size).fill(-1);
    this.stale = new Uint8Array(2 * size).fill(1);
    this.scores = new Array<ShareScore | null>(n).fill(null);
    this.known = new Uint8Array(n);
    this.excluded = new Uint8Array(n);
  }

  /** Slot i's score may have changed: it is asked again at the next `best`. */
  forget(i: number): void {
    this.known[i] = 0;
    this.touch(i);
  }

  /** Leaves slot i out of `best` until `include` (its score is kept). */
  exclude(i: number): void {
    this.excluded[i] = 1;
    this.touch(i);
  }

  include(i: number): void {
    this.excluded[i] = 0;
    this.touch(i);
  }

  /** Slot i's path must be recombined. */
  private touch(i: number): void {
    for (let node = this.size + i; node >= 1 && this.stale[node] === 0; node >>= 1) this.stale[node] = 1;
  }

  /** The best slot's index, or -1 when no slot has a score. */
  best(): number {
    return this.fix(1);
  }

  private fix(node: number): number {
    if (this.stale[node] === 0) return this.winner[node]!;
    let w: number;
    if (node >= this.size) {
      const i = node - this.size;
      if (i < this.n && this.known[i] === 0) {
        this.scores[i] = this.scoreOf(i);
        this.known[i] = 1;
      }
      w = i < this.n && this.excluded[i] === 0 && this.scores[i] !== null ? i : -1;
    } else {
      const a = this.fix(2 * node);
      const b = this.fix(2 * node + 1);
      // Equal scores: the left, lower index, as the scan in index order keeps its first.
      w = a < 0 ? b : b < 0 ? a : compareScores(this.scores[b]!, this.scores[a]!) < 0 ? b : a;
    }
    this.winner[node] = w;
    this.stale[node] = 0;
    return w;
  }
}

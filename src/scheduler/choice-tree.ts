import { compareScores, type ShareScore } from './share-policies.js';

/**
 * The best of a set of scored slots (lowest score; among equal scores the lowest slot), kept under
 * changes: a tournament tree over the slots, whose scores are read lazily through `scoreOf` and
 * forgotten by `forget`. A change costs its path to the root, and the next `best` recomputes only
 * the paths changed since; so a pass that places on one machine at a time finds the next best
 * machine in O(log n) rather than a scan of every machine (docs/throughput.md, "Placement at
 * scale"). The answer is the scan's: the first slot of the lowest score.
 */
export class ChoiceTree {
  /** Leaves from `size` on; each node holds the position of its subtree's best slot, or -1 when none has a score. */
  private readonly winner: Int32Array;
  /** Nodes to recombine; a stale node's ancestors are all stale too. */
  private readonly stale: Uint8Array;
  private readonly scores: (ShareScore | null)[];
  /** 1 when the position's score in `scores` is current. */
  private readonly known: Uint8Array;
  /** Positions left out of `best` for now (`exclude`), until `include`. */
  private readonly excluded: Uint8Array;
  private readonly size: number;
  private readonly n: number;

  constructor(
    /** The slots (machine indices), ascending: the tree's positions are their order. */
    private readonly slots: Int32Array,
    /** A slot's score, or null when it has none (does not fit). Asked again only after `forget`. */
    private readonly scoreOf: (slot: number) => ShareScore | null,
  ) {
    this.n = slots.length;
    let size = 1;
    while (size < this.n) size *= 2;
    this.size = size;
    this.winner = new Int32Array(2 * size).fill(-1);
    this.stale = new Uint8Array(2 * size).fill(1);
    this.scores = new Array<ShareScore | null>(this.n).fill(null);
    this.known = new Uint8Array(this.n);
    this.excluded = new Uint8Array(this.n);
  }

  /** The slot's position, or -1 when it is not one of the tree's. */
  private positionOf(slot: number): number {
    let lo = 0;
    let hi = this.n - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const s = this.slots[mid]!;
      if (s === slot) return mid;
      if (s < slot) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }

  /** The slot's score may have changed: it is asked again at the next `best`. */
  forget(slot: number): void {
    const p = this.positionOf(slot);
    if (p < 0) return;
    this.known[p] = 0;
    this.touch(p);
  }

  /** Leaves the slot out of `best` until `include` (its score is kept). */
  exclude(slot: number): void {
    const p = this.positionOf(slot);
    this.excluded[p] = 1;
    this.touch(p);
  }

  include(slot: number): void {
    const p = this.positionOf(slot);
    this.excluded[p] = 0;
    this.touch(p);
  }

  /** Position p's path must be recombined. */
  private touch(p: number): void {
    for (let node = this.size + p; node >= 1 && this.stale[node] === 0; node >>= 1) this.stale[node] = 1;
  }

  /** The best slot, or -1 when no slot has a score. */
  best(): number {
    if (!this.built) this.build();
    const p = this.fix(1);
    return p < 0 ? -1 : this.slots[p]!;
  }

  private built = false;

  /** The first `best`: every slot scored and every node combined, bottom up, in one loop each (no recursion). */
  private build(): void {
    this.built = true;
    for (let p = 0; p < this.size; p++) {
      const node = this.size + p;
      if (p < this.n && this.known[p] === 0) {
        this.scores[p] = this.scoreOf(this.slots[p]!);
        this.known[p] = 1;
      }
      this.winner[node] = p < this.n && this.excluded[p] === 0 && this.scores[p] !== null ? p : -1;
      this.stale[node] = 0;
    }
    for (let node = this.size - 1; node >= 1; node--) {
      this.winner[node] = this.combine(this.winner[2 * node]!, this.winner[2 * node + 1]!);
      this.stale[node] = 0;
    }
  }

  /** The better of two positions (-1: none); equal scores go to the left, the lower slot, as a scan in slot order keeps its first. */
  private combine(a: number, b: number): number {
    return a < 0 ? b : b < 0 ? a : compareScores(this.scores[b]!, this.scores[a]!) < 0 ? b : a;
  }

  private fix(node: number): number {
    if (this.stale[node] === 0) return this.winner[node]!;
    let w: number;
    if (node >= this.size) {
      const p = node - this.size;
      if (p < this.n && this.known[p] === 0) {
        this.scores[p] = this.scoreOf(this.slots[p]!);
        this.known[p] = 1;
      }
      w = p < this.n && this.excluded[p] === 0 && this.scores[p] !== null ? p : -1;
    } else {
      w = this.combine(this.fix(2 * node), this.fix(2 * node + 1));
    }
    this.winner[node] = w;
    this.stale[node] = 0;
    return w;
  }
}

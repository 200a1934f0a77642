/**
 * Items of one array in `compare`'s order, as a stable sort would give them, merged lazily from
 * runs already in order: each `take` costs O(log runs), and what is never taken is never ordered.
 *
 * Why: a pass reads tens of thousands of heads and walks about a thousand of them before it has
 * placed its 1,000 (docs/throughput.md, "Placement at scale"); sorting all of them was a tenth of
 * the pass. The server's heads come as one run per shape (each shape's queue in queue order, which
 * is `compareQueued`'s), a few dozen runs, so the walk pays for the heads it reads in order, not for
 * the ones behind them. Any input works: an unsorted one makes many short runs and the merge is a
 * heap sort, paid as it is taken.
 *
 * Same as `[...items].sort(compare)` restricted to the runs' items, wherever `compare` is a total
 * preorder (`compareQueued` is: docs/scheduling.md, "Order"): a run is a stretch of the input in
 * order, runs are merged by their heads and, on a tie, the earlier run first, so items equal under
 * `compare` keep their input order as the stable sort keeps it.
 */
export class MergedRuns<T> {
  /** Per run, the position of its next item in `items`, and where the run ends (exclusive). */
  private readonly at: number[] = [];
  private readonly ends: number[] = [];
  /** Runs not used up, as a binary heap: the run of the least head first (ties: the earlier run). */
  private heap: number[] = [];

  constructor(
    private readonly items: readonly T[],
    private readonly compare: (a: T, b: T) => number,
  ) {}

  /** Adds the run `items[start..end)`, which must be in order and come after every run added before it. */
  addRun(start: number, end: number): void {
    if (end <= start) return;
    this.at.push(start);
    this.ends.push(end);
  }

  /** Makes the heap of the runs added: call once, after the last `addRun` and before the first look. */
  seal(): this {
    const n = this.at.length;
    this.heap = Array.from({ length: n }, (_, r) => r);
    for (let k = (n >> 1) - 1; k >= 0; k--) this.down(k);
    return this;
  }

  /** The next item in order, left in place; undefined when every item was taken. */
  peek(): T | undefined {
    return this.heap.length === 0 ? undefined : this.items[this.at[this.heap[0]!]!];
  }

  /** Where in `items` the next item is (-1 when none): breaks ties between merges of one input. */
  peekPosition(): number {
    return this.heap.length === 0 ? -1 : this.at[this.heap[0]!]!;
  }

  /** Takes the next item in order (the one `peek` gives). */
  take(): T | undefined {
    const heap = this.heap;
    if (heap.length === 0) return undefined;
    const r = heap[0]!;
    const item = this.items[this.at[r]!];
    if (++this.at[r]! === this.ends[r]) {
      const last = heap.pop()!;
      if (heap.length === 0) return item;
      heap[0] = last;
    }
    this.down(0);
    return item;
  }

  /** Whether run `a`'s head comes before run `b`'s. */
  private before(a: number, b: number): boolean {
    const c = this.compare(this.items[this.at[a]!]!, this.items[this.at[b]!]!);
    return c < 0 || (c === 0 && a < b);
  }

  private down(k: number): void {
    const heap = this.heap;
    const n = heap.length;
    const r = heap[k]!;
    for (;;) {
      let child = 2 * k + 1;
      if (child >= n) break;
      if (child + 1 < n && this.before(heap[child + 1]!, heap[child]!)) child += 1;
      if (!this.before(heap[child]!, r)) break;
      heap[k] = heap[child]!;
      k = child;
    }
    heap[k] = r;
  }
}

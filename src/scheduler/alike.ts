/**
 * Groups of alike things, found by a number hashed from what makes them alike and an exact
 * comparison with each group's first: no text is made per thing. The planner groups 10,000
 * machines several ways a pass (docs/throughput.md, "Placement at scale"), and a key of text per
 * machine was a string of dozens of pieces each time, most of the pass's garbage.
 */
export class Alike<T> {
  /** By hash, the groups (ids) whose representatives have it. */
  private readonly buckets = new Map<number, number | number[]>();
  /** Per group, the thing it was made for (or its copy: `add`'s `keep`). */
  readonly representatives: T[] = [];

  constructor(
    private readonly hash: (x: T) => number,
    private readonly same: (a: T, b: T) => boolean,
  ) {}

  /** The group of `x`: the first made for a thing the same as it, else a new one for `keep(x)` (`x` itself by default: then it must not change while the groups are used). */
  groupOf(x: T, keep?: (x: T) => T): number {
    const h = this.hash(x);
    const known = this.buckets.get(h);
    if (typeof known === 'number') {
      if (this.same(this.representatives[known]!, x)) return known;
    } else if (known !== undefined) {
      for (const id of known) if (this.same(this.representatives[id]!, x)) return id;
    }
    const id = this.representatives.length;
    this.representatives.push(keep === undefined ? x : keep(x));
    if (known === undefined) this.buckets.set(h, id);
    else if (typeof known === 'number') this.buckets.set(h, [known, id]);
    else known.push(id);
    return id;
  }

  get size(): number {
    return this.representatives.length;
  }
}

/** A step of a 32-bit hash over numbers of any size (bytes of memory pass 2³²). */
export function mix(h: number, v: number): number {
  h = Math.imul(h ^ (v | 0), 0x85ebca6b);
  return Math.imul(h ^ ((v / 4294967296) | 0) ^ (h >>> 15), 0xc2b2ae35);
}

/** A step of the hash over a text: its length and a few of its characters (the comparison does the rest). */
export function mixText(h: number, s: string): number {
  return mix(mix(h, s.length), s.length === 0 ? 0 : s.charCodeAt(0) * 65536 + s.charCodeAt(s.length - 1));
}

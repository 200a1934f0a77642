/**
 * The ids of the last messages seen, to drop a repeat (a relay's second publish of a row whose
 * mark was lost). Two generations, as the statement cache: bounded, and a lookup is one or two
 * Set probes.
 */
export class RecentIds {
  private young = new Set<string>();
  private old = new Set<string>();

  constructor(private readonly max = 10_000) {}

  /** Whether `id` was seen (within the last `max` or so), without counting this as seeing it. */
  has(id: string): boolean {
    return this.young.has(id) || this.old.has(id);
  }

  /** True the first time `id` is seen (within the last `max` or so), false for a repeat. */
  first(id: string): boolean {
    if (this.has(id)) return false;
    if (this.young.size >= this.max / 2) {
      this.old = this.young;
      this.young = new Set();
    }
    this.young.add(id);
    return true;
  }
}

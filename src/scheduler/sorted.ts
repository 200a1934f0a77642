/**
 * `xs` sorted by `compare` in place, as `Array.prototype.sort` would (stable), but read once and
 * left alone when already in order: the server's cluster read comes in name order, and sorting
 * 10,000 machines by name on every pass cost what one look at each does not.
 */
export function sortIfNeeded<T>(xs: T[], compare: (a: T, b: T) => number): T[] {
  for (let i = 1; i < xs.length; i++) if (compare(xs[i - 1]!, xs[i]!) > 0) return xs.sort(compare);
  return xs;
}

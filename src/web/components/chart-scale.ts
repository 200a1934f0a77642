/** The arithmetic of a small line chart: a round top for the y axis, and points to SVG coordinates. Pure. */

/** The smallest of 1, 2, 2.5, 5 × 10ⁿ at or above `v` (at least `floor`): a top the eye reads at once. */
export function niceCeil(v: number, floor = 1): number {
  const x = Math.max(v, floor);
  const p = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= x - 1e-9) return m * p;
  return 10 * p;
}

export interface Point {
  t: number;
  v: number | null;
}

/**
 * An SVG path through the points, in a box of `width` × `height` spanning [t0, t1] and [0, top].
 * A null value breaks the line (nothing was measured there).
 */
export function linePath(points: readonly Point[], box: { t0: number; t1: number; top: number; width: number; height: number }): string {
  const span = Math.max(1, box.t1 - box.t0);
  let d = '';
  let pen = false;
  for (const p of points) {
    if (p.v === null) {
      pen = false;
      continue;
    }
    const x = ((p.t - box.t0) / span) * box.width;
    const y = box.height - (Math.min(p.v, box.top) / box.top) * box.height;
    d += `${pen ? 'L' : 'M'} ${x.toFixed(1)} ${y.toFixed(1)} `;
    pen = true;
  }
  return d.trim();
}

import type { PoolSample } from '../../api/contract/pool-view';
import type { Series } from '../components/line-chart';

/** Every pool in the samples, cpu first: their order gives each its colour, the same in every chart. */
export function poolNames(samples: PoolSample[]): string[] {
  return [...new Set(samples.flatMap((s) => s.pools.map((p) => p.pool)))].sort((a, b) => (a === 'cpu' ? -1 : b === 'cpu' ? 1 : a < b ? -1 : 1));
}

/**
 * A series per pool, of one figure of each sample (null where the pool has none of it), for the
 * pools that have that figure now: the last sample is the present (the server takes it when
 * asked), so a pool gone since (its queue emptied and no machine serves it), or one whose machines
 * are gone (no GPUs now), has no line or legend left to read as if it were still there. Colours
 * stay as `names` gives them, so a pool keeps its colour while others come and go.
 */
export function seriesOf(samples: PoolSample[], names: string[], value: (p: PoolSample['pools'][number]) => number | null): Series[] {
  return names
    .map((name, colour) => ({
      name,
      colour,
      points: samples.map((s) => {
        const p = s.pools.find((x) => x.pool === name);
        return { t: s.at, v: p ? value(p) : null };
      }),
    }))
    .filter((s) => s.points.at(-1)?.v != null);
}

import type { PoolSample } from './contract/pool-view.js';

/**
 * The pools over time, in memory: a sample every `intervalMs` (taken by the control plane's pool
 * sampler loop), kept for `keptMs`, oldest dropped first. Each server keeps its own since it
 * started (nothing is written to the database: the history is for looking at, Prometheus keeps
 * the long one). At the defaults, 15 s for 24 h: 5,760 samples of a few numbers per pool.
 */
export class PoolHistory {
  private readonly samples: PoolSample[] = [];

  constructor(
    readonly intervalMs: number,
    readonly keptMs: number,
  ) {}

  add(sample: PoolSample): void {
    this.samples.push(sample);
    const oldest = sample.at - this.keptMs;
    let drop = 0;
    while (drop < this.samples.length && this.samples[drop]!.at < oldest) drop++;
    if (drop > 0) this.samples.splice(0, drop);
  }

  /** The samples taken after `at` (ms), oldest first. */
  since(at = 0): PoolSample[] {
    let i = this.samples.length;
    while (i > 0 && this.samples[i - 1]!.at > at) i--;
    return this.samples.slice(i);
  }
}

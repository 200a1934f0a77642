import { freeGpuMilli, gpuClassOf, type ShareMachine, type ShareRequest } from './gpu-share.js';

/**
 * The paper's Clustering policy (GPU affinity, as the FGD simulator scores it): requests of a kind
 * ("share", "1-gpu", "2-gpu", … — `gpuClassOf`) go where that kind alone already runs (75–100
 * points), else where it runs with others (50–75), else on an idle machine (25–50), else anywhere
 * (0–25); within a band, the fuller machine wins: 25 × (max − free) / max, integer division, max
 * the largest machine's GPU thousandths. CPU-only requests score 0 everywhere. Higher is better.
 */
export function clusteringPoints(m: ShareMachine, r: ShareRequest, maxGpuMilli: number): number {
  const kind = gpuClassOf(r);
  if (kind === null) return 0;
  const classes = m.gpuClasses ?? {};
  const present = Object.keys(classes).filter((k) => classes[k]! > 0);
  const band = present.includes(kind) ? (present.length === 1 ? 75 : 50) : present.length === 0 ? 25 : 0;
  return Math.trunc((25 * (maxGpuMilli - freeGpuMilli(m))) / maxGpuMilli) + band;
}

/** CPUs and memory as the job spec writes them: "4 CPU", "500m", "16 GiB". */

export function formatCpu(millis: number): string {
  if (millis % 1000 === 0) return String(millis / 1000);
  if (millis < 1000) return `${millis}m`;
  return (millis / 1000).toFixed(1).replace(/\.0$/, '');
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v >= 100 || u === 0 ? Math.round(v) : v.toFixed(1).replace(/\.0$/, '')} ${units[u]}`;
}

/** "37%" of a whole; "–" when there is no whole. */
export function formatShare(part: number, whole: number): string {
  return whole > 0 ? `${Math.round((100 * part) / whole)}%` : '–';
}

/** "h100:0,1": an attempt's GPU type and device indices; "–" without GPUs. */
export function formatGpus(a: { gpus: readonly number[]; gpuType: string | null } | undefined): string {
  if (!a || a.gpus.length === 0) return '–';
  return `${a.gpuType ?? 'gpu'}:${a.gpus.join(',')}`;
}

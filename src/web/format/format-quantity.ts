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

/** "h100:0,1": an attempt's GPU type and device indices, a share "0.25 of h100:0"; "–" without GPUs. */
export function formatGpus(a: { gpus: readonly number[]; gpuType: string | null; gpuShare?: { milli: number } } | undefined): string {
  if (!a || a.gpus.length === 0) return '–';
  const gpus = `${a.gpuType ?? 'gpu'}:${a.gpus.join(',')}`;
  return a.gpuShare ? `${a.gpuShare.milli / 1000} of ${gpus}` : gpus;
}

/** What a stage asks of GPUs, as the spec says it: "2× h100", a share "0.25× h100", with "10 GiB" of GPU memory where bounded. */
export function formatGpuRequest(gpu: { count: number; types: readonly string[]; milli?: number; memoryBytes?: number }, anyType = 'GPU', or = '|'): string {
  const amount = gpu.milli !== undefined && gpu.milli < 1000 ? gpu.milli / 1000 : gpu.count;
  const memory = gpu.memoryBytes !== undefined ? ` (${formatBytes(gpu.memoryBytes)})` : '';
  return `${amount}× ${gpu.types.join(or) || anyType}${memory}`;
}

/** "GPU 0", or for a share "GPU 0 (0.5)": where an attempt runs, in a line. */
export function formatGpuPlace(a: { gpus: readonly number[]; gpuShare?: { milli: number } }): string {
  return `GPU ${a.gpus.join(',')}${a.gpuShare ? ` (${a.gpuShare.milli / 1000})` : ''}`;
}

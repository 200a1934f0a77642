import { formatBytes, type OutputLimits } from '../../domain/output-limits.js';

/** The files, biggest first, named in the message: enough to find the culprit, few enough to read. */
const NAMED = 3;

/**
 * Why an attempt's outputs are over its limits, or null when they fit (docs/security.md, "Output
 * limits"). Each file counts by its length, as the server would store it: a sparse file made by
 * `truncate -s 1G` counts as 1 GiB though it holds no block on this disk. Checked before any
 * upload, so an attempt over its limits uploads nothing and ends `outputs-failed` with this.
 */
export function outputsOverLimit(files: readonly { path: string; size: number }[], limits: OutputLimits): string | null {
  const total = files.reduce((t, f) => t + f.size, 0);
  if (files.length > limits.files) {
    return `outputs: ${files.length} files, over the stage's limit of ${limits.files} files (limits.outputs.files)`;
  }
  if (total <= limits.bytes) return null;
  const biggest = [...files]
    .sort((a, b) => b.size - a.size || a.path.localeCompare(b.path))
    .slice(0, NAMED)
    .map((f) => `${f.path} ${formatBytes(f.size)}`);
  const more = files.length > NAMED ? `, and ${files.length - NAMED} more` : '';
  return `outputs ${formatBytes(total)} over the stage's limit of ${formatBytes(limits.bytes)} (${biggest.join(', ')}${more}); nothing was uploaded (limits.outputs.bytes)`;
}

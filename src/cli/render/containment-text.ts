import type { ContainmentReport } from '../../api/contract/containment.js';

/**
 * What a machine's agent enforces, in one word for the `CONTAIN` column of `gantry machines`:
 * "mem,cpu,pids,dev" with only those enforced, "none" when nothing is, "?" when its agent did not
 * say (an agent before containment, or a server before it). Commas, not spaces, so the column
 * stays one word for awk, as STATUS does.
 */
export function containmentSummary(c: ContainmentReport | null | undefined): string {
  if (!c) return '?';
  const enforced = (
    [
      ['mem', c.memory],
      ['cpu', c.cpu],
      ['pids', c.pids],
      ['dev', c.devices],
    ] as const
  )
    .filter(([, on]) => on)
    .map(([word]) => word);
  return enforced.length ? enforced.join(',') : 'none';
}

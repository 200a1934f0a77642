/**
 * What an attempt may open on a v1 devices hierarchy (docs/containment.md, the table): after
 * `devices.deny a`, every block device, every character major the kernel lists in `/proc/devices`
 * but NVIDIA's (195), and of 195 only the attempt's own GPUs (`/dev/nvidia<minor>`, the minor is
 * the GPU's index) and the two every CUDA process needs: 255 `/dev/nvidiactl` and 254
 * `/dev/nvidia-modeset`. Slurm's ConstrainDevices does the same. Majors come from `/proc/devices`
 * rather than `c *:*` so that 195 can be left out; nvidia-uvm's major is dynamic and stays allowed.
 * `nvidia-caps` (dynamic too: MIG's capability files `/dev/nvidia-caps/nvidia-cap<M>`) is left
 * out as well, and only the attempt's MIG devices' minors are allowed, so that a MIG device of a
 * GPU cannot open the others of it (docs/machines.md, "What isolates MIG devices from each
 * other"); where one of its devices' minors is unknown, the whole major, as before.
 */

/** NVIDIA's character major: /dev/nvidia<N>, /dev/nvidiactl (255), /dev/nvidia-modeset (254). */
export const NVIDIA_MAJOR = 195;
const NVIDIA_SHARED_MINORS = [254, 255];

/** The name `/proc/devices` gives the major of MIG's capability files. */
const NVIDIA_CAPS_NAME = 'nvidia-caps';

/** The character devices of a `/proc/devices` text: majors in order, once each, and the major named `nvidia-caps`, if any. */
export function characterMajors(procDevices: string): { majors: number[]; nvidiaCaps: number | null } {
  const majors: number[] = [];
  let nvidiaCaps: number | null = null;
  let inCharacter = false;
  for (const line of procDevices.split('\n')) {
    if (/^Character devices:/.test(line)) inCharacter = true;
    else if (/^Block devices:/.test(line)) inCharacter = false;
    else if (inCharacter) {
      const m = /^\s*(\d+)\s+(\S+)/.exec(line);
      if (!m) continue;
      if (!majors.includes(Number(m[1]))) majors.push(Number(m[1]));
      // Exactly the name: nvidia-caps-imex-channels (IMEX, not MIG) keeps its whole major.
      if (m[2] === NVIDIA_CAPS_NAME) nvidiaCaps = Number(m[1]);
    }
  }
  return { majors, nvidiaCaps };
}

/**
 * The `devices.allow` rules (one write each) for an attempt given `gpuIndices` (its GPUs' device
 * minors) and `nvidiaCaps` (its MIG devices' capability minors, `all` where unknown: attempt-gpus.ts),
 * on a host whose `nvidia-caps` major is `capsMajor` (null: it has none).
 */
export function deviceAllowRules(
  majors: readonly number[],
  gpuIndices: readonly number[],
  capsMajor: number | null = null,
  nvidiaCaps: readonly number[] | 'all' = [],
): string[] {
  const rules = ['b *:* rwm'];
  for (const major of majors) if (major !== NVIDIA_MAJOR && major !== capsMajor) rules.push(`c ${major}:* rwm`);
  const minors = [...new Set([...gpuIndices, ...NVIDIA_SHARED_MINORS])];
  for (const minor of minors) rules.push(`c ${NVIDIA_MAJOR}:${minor} rwm`);
  if (capsMajor !== null) {
    if (nvidiaCaps === 'all') rules.push(`c ${capsMajor}:* rwm`);
    else for (const minor of new Set(nvidiaCaps)) rules.push(`c ${capsMajor}:${minor} rwm`);
  }
  return rules;
}

/**
 * What an attempt may open on a v1 devices hierarchy (docs/containment.md, the table): after
 * `devices.deny a`, every block device, every character major the kernel lists in `/proc/devices`
 * but NVIDIA's (195), and of 195 only the attempt's own GPUs (`/dev/nvidia<minor>`, the minor is
 * the GPU's index) and the two every CUDA process needs: 255 `/dev/nvidiactl` and 254
 * `/dev/nvidia-modeset`. Slurm's ConstrainDevices does the same. Majors come from `/proc/devices`
 * rather than `c *:*` so that 195 can be left out; nvidia-uvm's major is dynamic and stays allowed.
 */

/** NVIDIA's character major: /dev/nvidia<N>, /dev/nvidiactl (255), /dev/nvidia-modeset (254). */
export const NVIDIA_MAJOR = 195;
const NVIDIA_SHARED_MINORS = [254, 255];

/** The character majors of a `/proc/devices` text, in order, once each. */
export function characterMajors(procDevices: string): number[] {
  const majors: number[] = [];
  let inCharacter = false;
  for (const line of procDevices.split('\n')) {
    if (/^Character devices:/.test(line)) inCharacter = true;
    else if (/^Block devices:/.test(line)) inCharacter = false;
    else if (inCharacter) {
      const m = /^\s*(\d+)\s/.exec(line);
      if (m && !majors.includes(Number(m[1]))) majors.push(Number(m[1]));
    }
  }
  return majors;
}

/** The `devices.allow` rules (one write each) for an attempt given `gpuIndices`. */
export function deviceAllowRules(majors: readonly number[], gpuIndices: readonly number[]): string[] {
  const rules = ['b *:* rwm'];
  for (const major of majors) if (major !== NVIDIA_MAJOR) rules.push(`c ${major}:* rwm`);
  const minors = [...new Set([...gpuIndices, ...NVIDIA_SHARED_MINORS])];
  for (const minor of minors) rules.push(`c ${NVIDIA_MAJOR}:${minor} rwm`);
  return rules;
}

/**
 * The minors of MIG's capability device files (`/dev/nvidia-caps/nvidia-cap<minor>`), which the
 * driver lists in `/proc/driver/nvidia-caps/mig-minors`: one `name minor` line per capability,
 * `config 1`, `monitor 2`, `gpu0/gi1/access 12`, `gpu0/gi1/ci0/access 13`… Opening a MIG device
 * takes both of its files: its GPU instance's `access` and its compute instance's (what NVIDIA's
 * container toolkit binds, and Slurm's ConstrainDevices allows). docs/machines.md, "What isolates
 * MIG devices from each other".
 */

export const MIG_MINORS_PATH = '/proc/driver/nvidia-caps/mig-minors';

/** Capability name → minor. */
export type MigMinors = ReadonlyMap<string, number>;

/**
 * Parses mig-minors: lines of a name without spaces and a minor, separated by white space.
 * Blank lines are skipped; anything else throws, naming the line, as a table the agent cannot
 * read cannot be trusted to name the right files.
 */
export function parseMigMinors(text: string): MigMinors {
  const minors = new Map<string, number>();
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '') return;
    const m = /^(\S+)\s+(\d+)$/.exec(line);
    if (!m) throw new Error(`mig-minors line ${i + 1}: expected "NAME MINOR" (as "gpu0/gi1/access 12"), got: ${line}`);
    minors.set(m[1]!, Number(m[2]));
  });
  return minors;
}

/**
 * The two minors that open one MIG device: `gpu<G>/gi<I>/access` and `gpu<G>/gi<I>/ci<C>/access`,
 * G the GPU's minor (its `/dev/nvidia<G>`). Null when the table lacks either.
 */
export function migCapabilityMinors(minors: MigMinors, gpuMinor: number, gpuInstance: number, computeInstance: number): [number, number] | null {
  const gi = minors.get(`gpu${gpuMinor}/gi${gpuInstance}/access`);
  const ci = minors.get(`gpu${gpuMinor}/gi${gpuInstance}/ci${computeInstance}/access`);
  return gi === undefined || ci === undefined ? null : [gi, ci];
}

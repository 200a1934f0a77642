/**
 * MIG (Multi-Instance GPU) as nvidia-smi lists it: which GPU holds which instances
 * (`nvidia-smi -L`), and how much memory each instance profile has (`nvidia-smi mig -lgip`).
 * docs/machines.md, "MIG", says how the agent offers them.
 */

/** One MIG device (a compute instance) under a GPU, as `nvidia-smi -L` lists it. */
export interface ListedMigDevice {
  /** The profile, e.g. "3g.40gb", or "1c.3g.40gb" for one compute instance of several in a GPU instance. */
  profile: string;
  /** "Device N" of the line: the MIG device's number on its GPU, the same as `nvidia-smi`'s "MIG Dev". */
  device: number;
  /** What CUDA_VISIBLE_DEVICES takes: `MIG-<uuid>` (drivers from R470), `MIG-GPU-<uuid>/<gi>/<ci>` before. */
  uuid: string;
}

export interface ListedGpu {
  index: number;
  name: string;
  uuid: string;
  mig: ListedMigDevice[];
}

const GPU_LINE = /^GPU (\d+): (.+) \(UUID: ([^)\s]+)\)$/;
const MIG_LINE = /^MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)\s]+)\)$/;

/**
 * Parses `nvidia-smi -L`: a `GPU i: NAME (UUID: GPU-…)` line per GPU, each followed by an indented
 * `MIG PROFILE Device N: (UUID: MIG-…)` line per MIG device it holds. Blank lines are skipped;
 * anything else throws, as a listing the agent cannot read cannot be trusted to be complete.
 */
export function parseNvidiaSmiList(text: string): ListedGpu[] {
  const gpus: ListedGpu[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '') return;
    const gpu = GPU_LINE.exec(line);
    if (gpu) {
      gpus.push({ index: Number(gpu[1]), name: gpu[2]!.trim(), uuid: gpu[3]!, mig: [] });
      return;
    }
    const mig = MIG_LINE.exec(line);
    const parent = gpus.at(-1);
    if (mig && parent) {
      parent.mig.push({ profile: mig[1]!.toLowerCase(), device: Number(mig[2]), uuid: mig[3]! });
      return;
    }
    throw new Error(
      `nvidia-smi -L line ${i + 1}: ${mig ? 'a MIG device before any GPU' : 'neither "GPU i: NAME (UUID: …)" nor "MIG PROFILE Device N: (UUID: …)"'}, got: ${line}`,
    );
  });
  return gpus;
}

/** A profile's memory in MiB, by GPU index and GPU instance profile ("3g.40gb"). */
export type MigProfileMemory = Map<number, Map<string, number>>;

// `|   0  MIG 3g.71gb          9     2/2        69.75      No     60     3     0   |`: GPU, name,
// profile id, free/total instances, memory in GiB; the second line of each row has no name.
const PROFILE_ROW = /^\|\s*(\d+)\s+MIG\s+(\S+)\s+\d+\s+\d+\/\d+\s+(\d+(?:\.\d+)?)\s/;

/**
 * Parses `nvidia-smi mig -lgip` (the table of GPU instance profiles): the memory each profile
 * really has, which its name only rounds ("1g.18gb" is 16 GiB on an H200). Rows it cannot read
 * are left out: the name's figure then stands in (`migMemoryMiB`).
 */
export function parseMigProfiles(text: string): MigProfileMemory {
  const byGpu: MigProfileMemory = new Map();
  for (const line of text.split(/\r?\n/)) {
    const m = PROFILE_ROW.exec(line.trim());
    if (!m) continue;
    const gpu = Number(m[1]);
    let profiles = byGpu.get(gpu);
    if (!profiles) byGpu.set(gpu, (profiles = new Map()));
    profiles.set(m[2]!.toLowerCase(), Math.round(Number(m[3]) * 1024));
  }
  return byGpu;
}

/**
 * A MIG device's memory in MiB: its GPU instance's, from `-lgip` where known, else the figure in
 * the profile's name taken as GiB (an approximation: names round, "3g.71gb" has 69.75 GiB). A
 * compute instance of several ("1c.3g.40gb") shares its GPU instance's memory with the others.
 */
export function migMemoryMiB(profile: string, known: ReadonlyMap<string, number> | undefined): number | null {
  const gpuInstance = profile.replace(/^\d+c\./, '');
  const exact = known?.get(gpuInstance);
  if (exact !== undefined) return exact;
  const named = /(\d+)gb/.exec(gpuInstance);
  return named ? Number(named[1]) * 1024 : null;
}

/**
 * What GPUs this machine has, from nvidia-smi. The agent reports them when it registers; a
 * machine without nvidia-smi (or where it fails, e.g. no driver loaded) has no GPUs. A GPU in MIG
 * mode is offered as its MIG instances, each a GPU of its own type, never whole (docs/machines.md, "MIG").
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { errorText } from '../../lib/error-text.js';
import { migCapabilities, type MigCapabilities, type MigCapabilitySource } from './mig-capabilities.js';
import { parseMigDeviceIds } from './mig-device-ids.js';
import { migMemoryMiB, parseMigProfiles, parseNvidiaSmiList, type ListedGpu, type MigProfileMemory } from './mig-instances.js';
import { MIG_MINORS_PATH, parseMigMinors } from './mig-minors.js';

export interface GpuInfo {
  index: number;
  uuid: string;
  /** As nvidia-smi names it, e.g. "NVIDIA H100 80GB HBM3". */
  name: string;
  /** The model as a GPU type for scheduling, e.g. "h100". */
  type: string;
  memoryMiB: number;
  /**
   * The N of the `/dev/nvidia<N>` it runs on, which the devices cgroup and the sandbox let an
   * attempt open: a whole GPU's index (nvidia-smi numbers GPUs as their device files), a MIG
   * instance's parent's.
   */
  deviceMinor: number;
  /** A MIG device's capability files (mig-capabilities.ts); absent on a whole GPU. */
  migCaps?: MigCapabilities;
}

/** A row of the query: a GPU as the driver sees it, MIG or not. */
export interface QueriedGpu extends GpuInfo {
  /** `mig.mode.current` is Enabled: CUDA can use it only through its MIG instances. */
  migEnabled: boolean;
}

export const NVIDIA_SMI_ARGS = ['--query-gpu=index,uuid,name,memory.total,mig.mode.current', '--format=csv,noheader,nounits'] as const;
/** How many times the usual timeout `nvidia-smi -q`, which reads everything, is given. */
const SLOW_QUERY_FACTOR = 4;
/** For drivers before MIG (R450), which refuse a query that names `mig.mode.current`. */
export const NVIDIA_SMI_ARGS_BEFORE_MIG = ['--query-gpu=index,uuid,name,memory.total', '--format=csv,noheader,nounits'] as const;
/** A MIG instance's index on the wire: 100 × (its GPU's index + 1) + its MIG device number, so 100 is GPU 0's device 0. */
const MIG_INDEX_BASE = 100;

const BRANDS = new Set(['nvidia', 'tesla', 'geforce', 'quadro']);
/** Series words that are not a model on their own: "RTX 4090", "GTX 1080 Ti", "RTX A6000", "TITAN V". */
const SERIES = new Set(['rtx', 'gtx', 'titan']);
/** Words after a series model that name a different card: "RTX 4090 Ti", "RTX 6000 Ada Generation". */
const VARIANTS = new Set(['ti', 'super', 'ada']);

/**
 * The scheduling type for a GPU name: the lower-case model token, without the vendor, brand,
 * form factor or memory size. "NVIDIA A100-SXM4-80GB" -> "a100", "NVIDIA GeForce RTX 4090" ->
 * "rtx4090", "NVIDIA H100 80GB HBM3" -> "h100".
 */
export function gpuTypeFromName(name: string): string {
  const words = name
    .toLowerCase()
    .split(/\s+/)
    .filter((w) => w !== '' && !BRANDS.has(w));
  const first = words[0]?.split('-')[0] ?? '';
  let type = first;
  if (SERIES.has(first) && words.length > 1) {
    type += words[1]!.split('-')[0];
    for (const w of words.slice(2)) {
      if (!VARIANTS.has(w)) break;
      type += w;
    }
  }
  type = type.replace(/[^a-z0-9]/g, '');
  return type !== '' ? type : name.toLowerCase().replace(/[^a-z0-9]/g, '');
}

/**
 * Parses `nvidia-smi --query-gpu=index,uuid,name,memory.total[,mig.mode.current] --format=csv,noheader,nounits`.
 * A fifth column of `Enabled` marks a GPU in MIG mode; further columns are ignored; blank lines
 * are skipped; anything else malformed throws.
 */
export function parseNvidiaSmiQuery(csv: string): QueriedGpu[] {
  const gpus: QueriedGpu[] = [];
  csv.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '') return;
    const bad = (why: string): never => {
      throw new Error(`nvidia-smi output line ${i + 1}: ${why} (expected "index, uuid, name, memory.total"), got: ${line}`);
    };
    const cols = line.split(',').map((c) => c.trim());
    if (cols.length < 4) bad(`expected at least 4 columns, found ${cols.length}`);
    const [index, uuid, name, memory] = cols as [string, string, string, string];
    if (!/^\d+$/.test(index)) bad(`index "${index}" is not a non-negative integer`);
    if (uuid === '') bad('uuid is empty');
    if (name === '') bad('name is empty');
    if (!/^\d+(\.\d+)?$/.test(memory)) bad(`memory.total "${memory}" is not a number of MiB`);
    gpus.push({
      index: Number(index),
      uuid,
      name,
      type: gpuTypeFromName(name),
      memoryMiB: Math.round(Number(memory)),
      deviceMinor: Number(index),
      migEnabled: cols[4] === 'Enabled',
    });
  });
  return gpus;
}

/**
 * The GPUs the agent offers: a GPU not in MIG mode whole, a GPU in MIG mode as its MIG devices
 * (from `nvidia-smi -L`, matched by UUID), none when it has none yet. Each instance is a GPU of
 * the type "<parent type>-<profile>" (h100-3g.40gb), addressed by its MIG UUID, its memory from
 * `nvidia-smi mig -lgip` where known, its device file its parent's, and its capability files
 * from `caps` (or why they are unknown).
 */
export function offeredGpus(
  queried: readonly QueriedGpu[],
  listed: readonly ListedGpu[],
  profiles: MigProfileMemory = new Map(),
  caps: MigCapabilitySource = { ids: 'nvidia-smi -q was not asked', minors: 'mig-minors was not read' },
): GpuInfo[] {
  return queried.flatMap(({ migEnabled, ...g }): GpuInfo[] => {
    if (!migEnabled) return [g];
    const mig = (listed.find((l) => l.uuid === g.uuid) ?? listed.find((l) => l.index === g.index))?.mig ?? [];
    return mig.map((d) => {
      if (d.device >= MIG_INDEX_BASE) throw new Error(`nvidia-smi -L: GPU ${g.index} lists MIG device ${d.device}; at most ${MIG_INDEX_BASE} are expected`);
      return {
        index: MIG_INDEX_BASE * (g.index + 1) + d.device,
        uuid: d.uuid,
        name: `${g.name} MIG ${d.profile}`,
        type: `${g.type}-${d.profile}`,
        memoryMiB: migMemoryMiB(d.profile, profiles.get(g.index)) ?? g.memoryMiB,
        deviceMinor: g.deviceMinor,
        migCaps: migCapabilities(caps, g, d.device),
      };
    });
  });
}

/**
 * Runs nvidia-smi and returns this machine's GPUs; null when nvidia-smi is not installed or fails
 * (non-zero exit, e.g. no driver or no devices; timeout). Output that cannot be parsed throws,
 * since it means the machine's GPUs cannot be trusted rather than that there are none. Only a
 * machine with a GPU in MIG mode is asked for its MIG devices (`-L`), profiles (`mig -lgip`), the
 * devices' instance ids (`-q`) and the driver's capability minors (`migMinorsPath`); the last two
 * only refine containment, so their failure is recorded on each device (`migCaps`), never thrown.
 */
export async function discoverGpus(opts: { command?: string; timeoutMs?: number; migMinorsPath?: string } = {}): Promise<GpuInfo[] | null> {
  const timeoutMs = opts.timeoutMs ?? 5000;
  const run = (args: readonly string[], slow = false) => runCommand(opts.command ?? 'nvidia-smi', args, slow ? SLOW_QUERY_FACTOR * timeoutMs : timeoutMs);
  const csv = (await run(NVIDIA_SMI_ARGS)) ?? (await run(NVIDIA_SMI_ARGS_BEFORE_MIG));
  if (csv === null) return null;
  const queried = parseNvidiaSmiQuery(csv);
  if (!queried.some((g) => g.migEnabled)) return offeredGpus(queried, []);
  const list = await run(['-L']);
  // Its MIG instances unknown, a MIG GPU cannot be offered at all (whole, CUDA could not use it).
  if (list === null) throw new Error('nvidia-smi -L failed on a machine with a GPU in MIG mode: its MIG instances cannot be listed');
  // The profiles' exact memory is a refinement: without it the names' figures stand in.
  const profiles = parseMigProfiles((await run(['mig', '-lgip'])) ?? '');
  return offeredGpus(queried, parseNvidiaSmiList(list), profiles, await migCapabilitySource(run, opts.migMinorsPath ?? MIG_MINORS_PATH));
}

/** `nvidia-smi -q`'s instance ids and the mig-minors table, each or why it is missing. */
async function migCapabilitySource(
  run: (args: readonly string[], slow: boolean) => Promise<string | null>,
  migMinorsPath: string,
): Promise<MigCapabilitySource> {
  // The full report reads every counter of every GPU: seconds on a machine of eight.
  const report = await run(['-q'], true);
  const ids = report === null ? 'nvidia-smi -q failed' : parseMigDeviceIds(report);
  let minors: MigCapabilitySource['minors'];
  try {
    minors = parseMigMinors(await readFile(migMinorsPath, 'utf8'));
  } catch (err) {
    minors = `cannot read ${migMinorsPath}: ${errorText(err)}`;
  }
  return { ids, minors };
}

function runCommand(command: string, args: readonly string[], timeoutMs: number): Promise<string | null> {
  return new Promise<string | null>((resolve) => {
    execFile(command, [...args], { timeout: timeoutMs, encoding: 'utf8', windowsHide: true, maxBuffer: 1024 * 1024 }, (err, out) => resolve(err ? null : out));
  });
}

/**
 * What GPUs this machine has, from nvidia-smi. The agent reports them when it registers; a
 * machine without nvidia-smi (or where it fails, e.g. no driver loaded) has no GPUs.
 */
import { execFile } from 'node:child_process';

export interface GpuInfo {
  index: number;
  uuid: string;
  /** As nvidia-smi names it, e.g. "NVIDIA H100 80GB HBM3". */
  name: string;
  /** The model as a GPU type for scheduling, e.g. "h100". */
  type: string;
  memoryMiB: number;
}

export const NVIDIA_SMI_ARGS = ['--query-gpu=index,uuid,name,memory.total', '--format=csv,noheader,nounits'] as const;

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
 * Parses `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`.
 * Extra trailing columns are ignored; blank lines are skipped; anything else malformed throws.
 */
export function parseNvidiaSmiQuery(csv: string): GpuInfo[] {
  const gpus: GpuInfo[] = [];
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
    gpus.push({ index: Number(index), uuid, name, type: gpuTypeFromName(name), memoryMiB: Math.round(Number(memory)) });
  });
  return gpus;
}

/**
 * Runs nvidia-smi and returns this machine's GPUs; null when nvidia-smi is not installed or fails
 * (non-zero exit, e.g. no driver or no devices; timeout). Output that cannot be parsed throws,
 * since it means the machine's GPUs cannot be trusted rather than that there are none.
 */
export async function discoverGpus(opts: { command?: string; timeoutMs?: number } = {}): Promise<GpuInfo[] | null> {
  const command = opts.command ?? 'nvidia-smi';
  const stdout = await new Promise<string | null>((resolve) => {
    execFile(command, [...NVIDIA_SMI_ARGS], { timeout: opts.timeoutMs ?? 5000, encoding: 'utf8', windowsHide: true, maxBuffer: 1024 * 1024 }, (err, out) =>
      resolve(err ? null : out),
    );
  });
  return stdout === null ? null : parseNvidiaSmiQuery(stdout);
}

/**
 * Each MIG device's GPU instance and compute instance ids, from `nvidia-smi -q`: what names its
 * capability files in `/proc/driver/nvidia-caps/mig-minors` (mig-minors.ts). `nvidia-smi -L` does
 * not give them. docs/machines.md, "What isolates MIG devices from each other".
 */

/** One MIG device of a GPU: its number ("Index", the `Device N` of `-L`) and its instance ids. */
interface MigDeviceIds {
  device: number;
  gpuInstance: number;
  computeInstance: number;
}

/** A GPU of `nvidia-smi -q`, as far as MIG needs it. */
export interface QueriedMigGpu {
  /** `GPU UUID`; null where the section has none. */
  uuid: string | null;
  /** `Minor Number`: the N of `/dev/nvidia<N>` and of `gpu<N>/…` in mig-minors; null where it says N/A or is absent. */
  minor: number | null;
  devices: MigDeviceIds[];
}

const GPU_HEADER = /^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$/;
const FIELD = /^(\s*)([^:]+?)\s*:\s*(.*?)\s*$/;

/**
 * Parses `nvidia-smi -q` (the human-readable report): a `GPU 00000000:07:00.0` line at column 0
 * opens each GPU; inside it, each `MIG Device` block (under `MIG Devices` on newer drivers, right
 * under the GPU on older ones) holds `Index`, `GPU Instance ID` and `Compute Instance ID`. A block
 * ends at the next line indented no deeper than its header, so the `Processes` section's own
 * `GPU instance ID : N/A` fields are never taken for a device's. A MIG device block that lacks one
 * of the three, or holds one that is not a number, is left out: the caller then finds that device
 * missing and says so.
 */
export function parseMigDeviceIds(text: string): QueriedMigGpu[] {
  const gpus: QueriedMigGpu[] = [];
  let gpu: QueriedMigGpu | null = null;
  let block: { indent: number; fields: Map<string, string> } | null = null;
  const closeBlock = () => {
    if (gpu && block) {
      const [device, gi, ci] = ['Index', 'GPU Instance ID', 'Compute Instance ID'].map((k) => block!.fields.get(k));
      if ([device, gi, ci].every((v) => v !== undefined && /^\d+$/.test(v))) {
        gpu.devices.push({ device: Number(device), gpuInstance: Number(gi), computeInstance: Number(ci) });
      }
    }
    block = null;
  };
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.replace(/\s+$/, '');
    if (line.trim() === '') continue;
    const indent = line.length - line.trimStart().length;
    if (GPU_HEADER.test(line)) {
      closeBlock();
      gpu = { uuid: null, minor: null, devices: [] };
      gpus.push(gpu);
      continue;
    }
    if (!gpu) continue;
    if (block && indent <= block.indent) closeBlock();
    if (line.trim() === 'MIG Device') {
      block = { indent, fields: new Map() };
      continue;
    }
    const f = FIELD.exec(line);
    if (!f) continue;
    const [key, value] = [f[2]!, f[3]!];
    if (block) {
      // Only the block's own fields, not those of its sub-sections (Device Attributes, FB Memory Usage…).
      if (!block.fields.has(key)) block.fields.set(key, value);
    } else if (key === 'GPU UUID') gpu.uuid = value;
    else if (key === 'Minor Number') gpu.minor = /^\d+$/.test(value) ? Number(value) : null;
  }
  closeBlock();
  return gpus;
}

/**
 * Which capability files open each MIG device (docs/machines.md, "What isolates MIG devices from
 * each other"): its GPU and compute instance ids from `nvidia-smi -q` (mig-device-ids.ts), looked
 * up in the driver's mig-minors table (mig-minors.ts). Where either is missing the device's
 * capabilities are unknown, and says why: its attempts then keep today's rule, every capability
 * file open (the agent never refuses to start for it), and the containment report says the MIG
 * devices are not isolated.
 */
import type { QueriedMigGpu } from './mig-device-ids.js';
import { migCapabilityMinors, type MigMinors } from './mig-minors.js';

/** A MIG device's capability files: the minors of its `/dev/nvidia-caps/nvidia-cap<M>`, or why they are not known. */
export type MigCapabilities = { minors: readonly number[] } | { unknown: string };

/** What discovery found to name them with; a string says why that part is missing. */
export interface MigCapabilitySource {
  ids: readonly QueriedMigGpu[] | string;
  minors: MigMinors | string;
}

/**
 * The capabilities of MIG device `device` of GPU `parent`: its GPU is found in `-q` by UUID (by
 * position, nvidia-smi's index order, where the report has no UUID), its minor is `-q`'s `Minor
 * Number` or else the GPU's device file's.
 */
export function migCapabilities(src: MigCapabilitySource, parent: { index: number; uuid: string; deviceMinor: number }, device: number): MigCapabilities {
  if (typeof src.ids === 'string') return { unknown: src.ids };
  if (typeof src.minors === 'string') return { unknown: src.minors };
  const gpu = src.ids.find((g) => g.uuid === parent.uuid) ?? (src.ids.some((g) => g.uuid !== null) ? undefined : src.ids[parent.index]);
  const ids = gpu?.devices.find((d) => d.device === device);
  if (!gpu || !ids) return { unknown: `nvidia-smi -q does not list GPU ${parent.index}'s MIG device ${device} with its instance ids` };
  const gpuMinor = gpu.minor ?? parent.deviceMinor;
  const minors = migCapabilityMinors(src.minors, gpuMinor, ids.gpuInstance, ids.computeInstance);
  if (!minors)
    return { unknown: `mig-minors has no gpu${gpuMinor}/gi${ids.gpuInstance}/ci${ids.computeInstance} (GPU ${parent.index}'s MIG device ${device})` };
  return { minors };
}

/**
 * Whether a machine's MIG devices are kept from each other's capability files: null when it has
 * none; not isolated, with the first reason, when any device's are unknown.
 */
export type MigIsolation = { isolated: true } | { isolated: false; why: string } | null;

export function migIsolation(gpus: readonly { migCaps?: MigCapabilities }[]): MigIsolation {
  const caps = gpus.flatMap((g) => (g.migCaps ? [g.migCaps] : []));
  if (caps.length === 0) return null;
  const unknown = caps.find((c): c is { unknown: string } => 'unknown' in c);
  return unknown ? { isolated: false, why: unknown.unknown } : { isolated: true };
}

import { formatMemory } from '../spec/quantity.js';
import { OutputLimitExceeded } from './errors.js';

/**
 * How much a stage may leave as outputs (docs/security.md, "Output limits"): bytes, counted as
 * each file's length (a sparse file counts as its length, which is what the server would store),
 * and files. Enforced by the agent before it uploads and by the server's upload route as the
 * bytes stream in.
 */
export interface OutputLimits {
  bytes: number;
  files: number;
}

/** What a stage's spec asks (`limits.outputs`); null: the server's default. */
export interface StageOutputLimits {
  bytes: number | null;
  files: number | null;
}

/**
 * The server's settings: what a stage gets when it asks nothing, the most it may ask, and the most
 * a team's committed outputs may hold together (null: no bound per team).
 */
export interface OutputPolicy {
  stageDefault: OutputLimits;
  stageMax: OutputLimits;
  teamMaxBytes: number | null;
}

/**
 * 10 GiB and 10,000 files a stage unless it asks: a checkpoint of a model of a few billion
 * parameters, or a day's shards of a dataset, fit; a stage that writes more is rare enough to say
 * so in its spec. At most 1 TiB and 1,000,000 files: the artifact store is a disk the server owns,
 * not object storage (Nomad bounds an artifact's unpacking the same way, by bytes and by files).
 * No bound per team unless the operator sets one: the server does not know its disk's size.
 */
export const DEFAULT_OUTPUT_POLICY: Readonly<OutputPolicy> = Object.freeze({
  stageDefault: Object.freeze({ bytes: 10 * 1024 ** 3, files: 10_000 }),
  stageMax: Object.freeze({ bytes: 1024 ** 4, files: 1_000_000 }),
  teamMaxBytes: null,
});

/** The limits an attempt of a stage runs under: what it asked (or the default), never above the server's maximum. */
export function effectiveOutputLimits(asked: StageOutputLimits | null | undefined, policy: OutputPolicy): OutputLimits {
  return {
    bytes: Math.min(asked?.bytes ?? policy.stageDefault.bytes, policy.stageMax.bytes),
    files: Math.min(asked?.files ?? policy.stageDefault.files, policy.stageMax.files),
  };
}

/** Bytes for people, in the spec's binary units: "1.0Gi" reads as "1.0 GiB". */
export function formatBytes(n: number): string {
  const s = formatMemory(n);
  return /[KMGT]i$/.test(s) ? `${s.slice(0, -2)} ${s.slice(-2, -1)}iB` : `${s} byte${n === 1 ? '' : 's'}`;
}

/** What an attempt has used of its limits, as its upload of `path` finds it (the store's outputUploadRoom reads it). */
export interface OutputUsage {
  limits: OutputLimits;
  /** What the attempt uploaded under its other paths (a path sent again replaces its file). */
  otherBytes: number;
  otherFiles: number;
  team: string;
  /** The team's bound: its quota's `outputs`, else the policy's teamMaxBytes; null: none. */
  teamMaxBytes: number | null;
  /** The bytes of the team's committed outputs, each stored file once; null where no team bound is set. */
  teamBytes: number | null;
}

/** The most bytes one upload may have, and which limit says so (for the 413's message). */
export interface UploadRoom {
  bytes: number;
  limit: 'stage-bytes' | 'team-bytes';
  /** The limit in words: "the stage's limit of 256 MiB (1 KiB of other outputs uploaded already)". */
  says: string;
}

/**
 * The room an upload of `path` has: the stage's bytes less what the attempt uploaded under its
 * other paths, and the team's bound less its committed outputs and those same uploads. A file
 * count already at the limit refuses the upload at once (OutputLimitExceeded).
 */
export function uploadRoom(u: OutputUsage, path: string): UploadRoom {
  if (u.otherFiles + 1 > u.limits.files)
    throw new OutputLimitExceeded(
      'stage-files',
      `output ${path} would be file ${u.otherFiles + 1} of the attempt's outputs: over the stage's limit of ${u.limits.files} files`,
    );
  const stage: UploadRoom = {
    bytes: u.limits.bytes - u.otherBytes,
    limit: 'stage-bytes',
    says: `the stage's limit of ${formatBytes(u.limits.bytes)}${u.otherBytes ? ` (${formatBytes(u.otherBytes)} of other outputs uploaded already)` : ''}`,
  };
  if (u.teamMaxBytes === null || u.teamBytes === null) return stage;
  const team: UploadRoom = {
    bytes: u.teamMaxBytes - u.teamBytes - u.otherBytes,
    limit: 'team-bytes',
    says: `team ${u.team}'s limit of ${formatBytes(u.teamMaxBytes)} of stored outputs (${formatBytes(u.teamBytes)} committed${u.otherBytes ? `, ${formatBytes(u.otherBytes)} of this attempt's uploaded` : ''})`,
  };
  return team.bytes < stage.bytes ? team : stage;
}

/** The refusal of an upload of `size` bytes (null: not known, more than the room arrived) over `room`. */
export function overRoom(room: UploadRoom, path: string, size: number | null): OutputLimitExceeded {
  const has = size === null ? `more than ${formatBytes(Math.max(room.bytes, 0))}` : formatBytes(size);
  return new OutputLimitExceeded(room.limit, `output ${path} (${has}) is over ${room.says}: nothing of it was kept`);
}

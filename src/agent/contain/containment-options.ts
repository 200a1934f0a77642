/**
 * How an agent contains its attempts (docs/containment.md): the choices of `gantry agent`'s flags,
 * parsed once. The mechanisms themselves are found on the host at start (detect-cgroups.ts).
 */

export const CONTAINMENT_MODES = ['auto', 'require', 'off'] as const;
export type ContainmentMode = (typeof CONTAINMENT_MODES)[number];

/** systemd's DynamicUser range: uids no distribution hands out to its own users. */
export const DEFAULT_UID_RANGE: readonly [number, number] = [61184, 65519];
export const DEFAULT_PIDS_MAX = 4096;

export interface ContainmentOptions {
  /** `auto`: contain with what the host offers and say what is missing; `require`: refuse to start
   *  unless memory, CPU, pids and the kill are all enforced; `off`: no cgroups, no user switch. */
  mode: ContainmentMode;
  /** When the agent runs as root and `runAs` is unset: each running attempt gets a uid of this range. */
  uidRange: readonly [number, number];
  /** Every attempt runs as this existing user (a name or a uid) rather than one of the range. */
  runAs: string | null;
  /** An attempt's pids limit when its stage sets none. */
  pidsMax: number;
  /** Run commands under bubblewrap: read-only root, private /tmp, /dev with only their GPUs, no network unless asked. */
  sandbox: boolean;
  /** Where the cgroup hierarchies are looked for: `/` on a host; a fake tree in tests. */
  hostRoot: string;
  /** Where the agents of this host record the uids they hand out (uid-locks.ts): shared by all of them; a temporary one in tests. */
  uidLockDir: string;
}

export const DEFAULT_CONTAINMENT: ContainmentOptions = {
  mode: 'auto',
  uidRange: DEFAULT_UID_RANGE,
  runAs: null,
  pidsMax: DEFAULT_PIDS_MAX,
  sandbox: false,
  hostRoot: '/',
  uidLockDir: '/run/gantry/uids',
};

export class ContainmentOptionError extends Error {}

/** `--uid-range 61184-65519`. */
export function parseUidRange(text: string): [number, number] {
  const m = /^(\d+)-(\d+)$/.exec(text.trim());
  if (!m) throw new ContainmentOptionError(`--uid-range "${text}": expected FIRST-LAST, e.g. 61184-65519`);
  const first = Number(m[1]);
  const last = Number(m[2]);
  if (first < 1000 || last > 2 ** 31 - 2 || first > last) {
    throw new ContainmentOptionError(`--uid-range "${text}": FIRST must be at least 1000 and not above LAST (a system user's uid would be handed out)`);
  }
  return [first, last];
}

export function parseContainmentMode(text: string): ContainmentMode {
  const mode = CONTAINMENT_MODES.find((m) => m === text);
  if (!mode) throw new ContainmentOptionError(`--containment "${text}": expected one of ${CONTAINMENT_MODES.join(', ')}`);
  return mode;
}

export function parsePidsMax(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 16 || n > 4_194_304) throw new ContainmentOptionError(`--pids-max "${text}": expected a whole number from 16 to 4194304`);
  return n;
}

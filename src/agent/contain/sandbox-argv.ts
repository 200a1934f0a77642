/**
 * The bubblewrap prefix of one attempt's command under `--sandbox` (docs/containment.md, "The
 * sandbox"): what goes in LaunchContainment.wrap. The launcher execs it after the process joined
 * its cgroups and became the attempt's user, so bwrap runs unprivileged and builds the sandbox in
 * a user namespace of its own.
 */
import { existsSync, readdirSync, realpathSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { errorText } from '../../lib/error-text.js';

/** A bubblewrap that works on this host (find-sandbox.ts). */
export interface SandboxTool {
  /** Its absolute path. */
  readonly bwrap: string;
  /** It knows `--disable-userns` (0.8.0 and later): the command cannot make user namespaces of its own. */
  readonly disableUserns: boolean;
}

export interface SandboxAttempt {
  readonly tool: SandboxTool;
  /** The device minors of the attempt's GPUs (attempt-gpus.ts: a whole GPU's index, a MIG instance's parent's): each one's `/dev/nvidia<N>` is in its /dev. */
  readonly gpuIndices: readonly number[];
  /**
   * The minors of its MIG devices' capability files (attempt-gpus.ts): each one's
   * `/dev/nvidia-caps/nvidia-cap<M>` is in its /dev; `all`, where one is unknown, binds every file
   * of `/dev/nvidia-caps`. Absent: none (no MIG device).
   */
  readonly nvidiaCaps?: readonly number[] | 'all';
  /** Its own directories, the only places it may write (besides its private /tmp and /dev/shm). */
  readonly dirs: {
    readonly work: string;
    readonly output: string;
    readonly input: string;
    readonly checkpoint: string | null;
    /** GANTRY_PROGRESS_FILE: its directory is bound, the file need not exist yet. */
    readonly progressFile: string | null;
  };
  /** The stage said `network: true` (AttemptLimitsWire.network). */
  readonly network: boolean;
  /** Where the device files are taken from: `/dev` on a host, a directory of mknod'd nodes in tests. */
  readonly devDir?: string;
}

export class SandboxArgvError extends Error {}

/** The NVIDIA files every CUDA process opens whatever its GPUs, bound when the host has them. */
const NVIDIA_CONTROL_FILES = ['nvidiactl', 'nvidia-uvm', 'nvidia-uvm-tools', 'nvidia-modeset'];

/**
 * `bwrap … --` for one attempt: the command follows. Device files are looked up in `devDir` when
 * called (a GPU declared with `--gpus` on a machine without its device file gets none).
 */
export function sandboxArgv(a: SandboxAttempt): string[] {
  for (const i of a.gpuIndices) {
    if (!Number.isInteger(i) || i < 0) throw new SandboxArgvError(`sandbox: gpuIndices holds ${String(i)}, not a GPU index (a whole number from 0)`);
  }
  const caps = a.nvidiaCaps ?? [];
  if (caps !== 'all') {
    for (const m of caps)
      if (!Number.isInteger(m) || m < 0) throw new SandboxArgvError(`sandbox: nvidiaCaps holds ${String(m)}, not a device minor (a whole number from 0)`);
  }
  const devDir = a.devDir ?? '/dev';
  const { work, output, input, checkpoint, progressFile } = a.dirs;
  const own = ownDirectories(
    Object.entries({ work, output, input, checkpoint, 'the progress file': progressFile }).flatMap(([what, p]) => {
      if (p === null) return [];
      if (!isAbsolute(p)) throw new SandboxArgvError(`sandbox: ${what} "${p}" is not an absolute path`);
      return [realDirectory(what, what === 'the progress file' ? dirname(p) : p)];
    }),
  );
  return [
    ...sandboxBase(a.tool, a.network),
    ...deviceBinds(devDir, a.gpuIndices, caps, a.network),
    ...own.flatMap((d) => ['--bind', d, d]),
    '--chdir',
    resolve(work),
    '--',
  ];
}

/**
 * Namespaces and the file system every sandboxed command gets, the probe's included
 * (find-sandbox.ts), so that what the probe proved is what attempts run with:
 * - a user namespace (what lets an unprivileged bwrap mount anything), with no way to make more
 *   where bwrap knows how, and no capabilities even when bwrap itself runs as root;
 * - its own pid namespace and a /proc of it: the command sees and signals only its own processes,
 *   not other attempts' command lines nor the agent's. It runs as pid 2 under bwrap's small init,
 *   which reaps it and passes its status out; not `--as-pid-1`, as a pid 1 ignores every signal it
 *   has no handler for and a command would then outlive the TERM of a stop;
 * - its own System V IPC and POSIX message queues, so no other attempt's shared memory;
 * - no network (only `lo`, up) unless the stage asked for it;
 * - the host's root read-only, a /dev of its own, an empty /tmp of its own, and without the
 *   network an empty /run too: leaving only the network interfaces out still lets a command reach
 *   every daemon whose Unix socket under /run is open to all (PostgreSQL's, for one);
 *   with the network it keeps /run, where /etc/resolv.conf may point (systemd-resolved).
 * Not `--new-session` nor `--die-with-parent`: docs/containment.md, "The sandbox".
 */
export function sandboxBase(tool: SandboxTool, network: boolean): string[] {
  return [
    tool.bwrap,
    '--unshare-user',
    ...(tool.disableUserns ? ['--disable-userns'] : []),
    '--unshare-pid',
    '--unshare-ipc',
    ...(network ? [] : ['--unshare-net']),
    '--cap-drop',
    'ALL',
    '--ro-bind',
    '/',
    '/',
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--tmpfs',
    '/tmp',
    ...(network ? [] : ['--tmpfs', '/run']),
  ];
}

/**
 * The attempt's own GPUs' device files, its MIG devices' capability files, the NVIDIA files every CUDA process needs, and with the
 * network the RDMA devices (`/dev/infiniband`, what NCCL uses between machines): bound from
 * `devDir` where they exist, in a /dev that otherwise holds only null, zero, full, random, urandom,
 * tty, pts and shm.
 */
function deviceBinds(devDir: string, gpuIndices: readonly number[], caps: readonly number[] | 'all', network: boolean): string[] {
  const capFiles = caps === 'all' ? listed(devDir, 'nvidia-caps') : [...new Set(caps)].sort((x, y) => x - y).map((m) => `nvidia-cap${m}`);
  const names = [
    ...[...new Set(gpuIndices)].sort((x, y) => x - y).map((i) => `nvidia${i}`),
    ...NVIDIA_CONTROL_FILES,
    ...capFiles.map((f) => join('nvidia-caps', f)),
    ...(network ? ['infiniband'] : []),
  ];
  return names.filter((n) => existsSync(join(devDir, n))).flatMap((n) => ['--dev-bind', join(devDir, n), join('/dev', n)]);
}

/** The entries of `devDir/sub`, sorted; none when it is not there. */
function listed(devDir: string, sub: string): string[] {
  try {
    return readdirSync(join(devDir, sub)).sort();
  } catch {
    return [];
  }
}

/**
 * Where a directory really is: bwrap cannot mount onto a symbolic link, so a directory reached
 * through one (a data directory on /data -> /mnt/nvme0) is bound where it really is, and the link,
 * which the read-only root shows, leads there inside as outside.
 */
function realDirectory(what: string, p: string): string {
  try {
    return realpathSync(p);
  } catch (err) {
    throw new SandboxArgvError(`sandbox: ${what} "${p}": ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such directory' : errorText(err)}`);
  }
}

/**
 * The directories to bind, each once: one inside another is bound with it (the progress file's
 * directory is the attempt's, which holds work/, output/ and input/), and parents come first, as
 * bwrap mounts in order and a parent mounted later would hide its child.
 */
function ownDirectories(dirs: string[]): string[] {
  const sorted = [...new Set(dirs)].sort();
  return sorted.filter((d) => !sorted.some((p) => p !== d && isInside(d, p)));
}

function isInside(d: string, parent: string): boolean {
  const r = relative(parent, d);
  return r !== '' && r !== '..' && !r.startsWith('../') && !isAbsolute(r);
}

/**
 * One attempt's cgroups, one directory per hierarchy the agent uses (cgroup-tree.ts decides which):
 * made and limited before the command starts (the command writes its own pid into each of
 * `procsFiles` before it execs, so nothing it forks was ever outside), then signaled, killed as a
 * whole, watched until empty, read for what it used, and removed. docs/containment.md has the
 * table of what is written where.
 *
 * Synchronous file calls: cgroupfs lives in memory, and an attempt's start costs a handful of
 * writes on the agent's hot path (about ten on v1 with the devices rules).
 */
import { existsSync, mkdirSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import type { AttemptLimitsWire } from '../../api/contract/containment.js';
import type { ContainmentKill } from '../../api/contract/containment.js';
import { sleep } from '../../lib/sleep.js';
import { CgroupFileError, readCgroupFile, readKeyedValue, readNumber, readPids, writeCgroupFile } from './cgroup-file.js';
import type { CgroupSource, V1Controller } from './detect-cgroups.js';
import { deviceAllowRules, NVIDIA_MAJOR } from './v1-device-rules.js';

/** Where an attempt's cgroups are and what each is for (CgroupTree.layout). */
export interface AttemptCgroupLayout {
  attemptId: string;
  /** Its v2 directory: the kill, emptiness (`cgroup.events`), and the controllers taken from v2. */
  v2: string | null;
  /** Its v1 directories by controller; co-mounted controllers share one. */
  v1: ReadonlyMap<V1Controller, string>;
  memory: CgroupSource | null;
  cpu: CgroupSource | null;
  pids: CgroupSource | null;
  devices: boolean;
  kill: ContainmentKill;
  /** The host's character majors (`/proc/devices`), for the v1 devices rules. */
  characterMajors: readonly number[];
}

/** What an attempt is limited to: its assignment's limits (null from a server before containment), the agent's default pids limit, its GPUs. */
export interface AttemptCgroupSpec {
  limits: AttemptLimitsWire | null;
  pidsMax: number;
  gpuIndices: readonly number[];
}

/** What an attempt used, read from its cgroups; null where no hierarchy measures it. */
export interface CgroupUsage {
  /** Processes the kernel's OOM killer killed in it (its memory limit reached). */
  oomKills: number;
  memoryPeakBytes: number | null;
  cpuSeconds: number | null;
  /** The memory limit it ran under; null: none. */
  memoryLimitBytes: number | null;
}

const CPU_PERIOD_US = 100_000;
/** The kernel's smallest CFS quota. */
const MIN_QUOTA_US = 1000;
/** v1 says "no limit" with the largest page-aligned 64-bit number; anything this large is none. */
const UNLIMITED_V1 = 2 ** 62;
const POLL_MS = 10;
/** How long remove() retries an rmdir refused with EBUSY (a process just killed is still leaving). */
const REMOVE_RETRY_MS = 2000;
/** How long killAll() waits for a freezer to report FROZEN before it kills anyway. */
const FREEZE_WAIT_MS = 1000;
/** Rounds of SIGKILL-every-pid before killAll() gives up on a cgroup that keeps filling (a fork loop without a freezer). */
const KILL_ROUNDS = 100;

export class AttemptCgroup {
  /** Every directory, the v2 one first; co-mounted v1 controllers counted once. */
  readonly dirs: readonly string[];
  /** The files the command writes its pid into before it execs (LaunchContainment.procsFiles). */
  readonly procsFiles: readonly string[];

  private constructor(readonly layout: AttemptCgroupLayout) {
    this.dirs = [...new Set([...(layout.v2 ? [layout.v2] : []), ...layout.v1.values()])];
    this.procsFiles = this.dirs.map((d) => join(d, 'cgroup.procs'));
  }

  /**
   * Makes its directories and writes its limits. Throws (a CgroupFileError naming the file) when
   * one cannot be made or written, after removing what it made: an attempt never runs with only
   * part of its limits.
   */
  static create(layout: AttemptCgroupLayout, spec: AttemptCgroupSpec): AttemptCgroup {
    checkSpec(layout.attemptId, spec);
    const cg = new AttemptCgroup(devicesNeeded(layout, spec) ? layout : withoutDevices(layout));
    const made: string[] = [];
    try {
      for (const dir of cg.dirs) {
        try {
          mkdirSync(dir);
          made.push(dir);
        } catch (err) {
          // Left by an agent that crashed between making it and recording the attempt: reused.
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST')
            throw new CgroupFileError(dir, (err as NodeJS.ErrnoException).code, `cannot create ${dir}: ${(err as Error).message}`);
        }
      }
      cg.writeLimits(spec);
    } catch (err) {
      for (const dir of made.reverse()) {
        try {
          rmdirSync(dir);
        } catch {
          // Nothing joined it yet; a leftover is swept at the next start.
        }
      }
      throw err;
    }
    return cg;
  }

  /** An attempt's cgroups as a previous run of the agent made them (a restart re-attaches; the sweep kills). */
  static open(layout: AttemptCgroupLayout): AttemptCgroup {
    return new AttemptCgroup(layout);
  }

  get attemptId(): string {
    return this.layout.attemptId;
  }

  /** Every process in it (any hierarchy: one that joined some before it failed counts too). */
  pids(): number[] {
    const all = new Set<number>();
    for (const f of this.procsFiles) for (const pid of readPids(f)) all.add(pid);
    return [...all];
  }

  /** Whether any process is still in it: v2's `cgroup.events`, else every v1 `cgroup.procs`. */
  populated(): boolean {
    const { v2 } = this.layout;
    if (v2) return readKeyedValue(join(v2, 'cgroup.events'), 'populated') === 1;
    return this.procsFiles.some((f) => readPids(f).length > 0);
  }

  /** Sends `signal` to every process in it; how many it reached. */
  signal(signal: NodeJS.Signals): number {
    let n = 0;
    for (const pid of this.pids()) if (sendSignal(pid, signal)) n++;
    return n;
  }

  /**
   * Kills every process in it, none able to fork meanwhile: v2 `cgroup.kill`; else the v1 freezer
   * (freeze, SIGKILL every pid, thaw: the kills land as they thaw); else SIGKILL every pid until
   * none is left. Resolves once the kills are sent; waitEmpty() says when they are gone.
   */
  async killAll(): Promise<void> {
    const { layout } = this;
    switch (layout.kill) {
      case 'cgroup.kill':
        writeCgroupFile(join(layout.v2!, 'cgroup.kill'), '1');
        // A process that joined a v1 hierarchy and not yet v2 (its launch failed between).
        this.signal('SIGKILL');
        return;
      case 'freezer':
        return this.freezeKillThaw(layout.v1.get('freezer')!);
      case 'process-group':
        for (let round = 0; round < KILL_ROUNDS; round++) {
          if (this.signal('SIGKILL') === 0) return;
          await sleep(POLL_MS);
        }
        return;
    }
  }

  /** True once it is empty, false if it is not within `ms`. */
  async waitEmpty(ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    for (;;) {
      if (!this.populated()) return true;
      if (Date.now() >= deadline) return false;
      await sleep(Math.min(POLL_MS, Math.max(1, deadline - Date.now())));
    }
  }

  /** What it used (read after it is empty, for the final figures). */
  usage(): CgroupUsage {
    const { layout } = this;
    let oomKills = 0;
    let memoryPeakBytes: number | null = null;
    let memoryLimitBytes: number | null = null;
    let cpuSeconds: number | null = null;
    if (layout.memory === 'v2') {
      const dir = layout.v2!;
      oomKills = readKeyedValue(join(dir, 'memory.events'), 'oom_kill') ?? 0;
      memoryPeakBytes = readNumber(join(dir, 'memory.peak'));
      memoryLimitBytes = readNumber(join(dir, 'memory.max'));
    } else if (layout.memory === 'v1') {
      const dir = layout.v1.get('memory')!;
      oomKills = readKeyedValue(join(dir, 'memory.oom_control'), 'oom_kill') ?? 0;
      memoryPeakBytes = readNumber(join(dir, 'memory.max_usage_in_bytes'));
      const limit = readNumber(join(dir, 'memory.limit_in_bytes'));
      memoryLimitBytes = limit !== null && limit < UNLIMITED_V1 ? limit : null;
    }
    const cpuacct = layout.cpu === 'v1' ? layout.v1.get('cpuacct') : undefined;
    if (cpuacct) {
      const ns = readNumber(join(cpuacct, 'cpuacct.usage'));
      cpuSeconds = ns === null ? null : ns / 1e9;
    } else if (layout.v2) {
      // v2 counts CPU time in every cgroup, with or without its cpu controller.
      const us = readKeyedValue(join(layout.v2, 'cpu.stat'), 'usage_usec');
      cpuSeconds = us === null ? null : us / 1e6;
    }
    return { oomKills, memoryPeakBytes, cpuSeconds, memoryLimitBytes };
  }

  /** Removes its directories (it must be empty); one already gone is fine. */
  async remove(): Promise<void> {
    for (const dir of [...this.dirs].reverse()) {
      const deadline = Date.now() + REMOVE_RETRY_MS;
      for (;;) {
        try {
          rmdirSync(dir);
          break;
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'ENOENT') break;
          if (code !== 'EBUSY' || Date.now() >= deadline) throw new CgroupFileError(dir, code, `cannot remove ${dir}: ${(err as Error).message}`);
          await sleep(POLL_MS);
        }
      }
    }
  }

  private writeLimits(spec: AttemptCgroupSpec): void {
    const { layout } = this;
    const { limits } = spec;
    const memory = limits ? (limits.memoryBytes ?? limits.requestMemoryBytes) : null;
    if (memory !== null && layout.memory === 'v2') {
      const dir = layout.v2!;
      writeCgroupFile(join(dir, 'memory.max'), String(memory));
      writeOptional(join(dir, 'memory.swap.max'), '0');
      // One process over the limit ends the attempt, not a random one of its processes.
      writeCgroupFile(join(dir, 'memory.oom.group'), '1');
    } else if (memory !== null && layout.memory === 'v1') {
      const dir = layout.v1.get('memory')!;
      // The memory limit first: memsw may never be below it.
      writeCgroupFile(join(dir, 'memory.limit_in_bytes'), String(memory));
      // Absent without swap accounting (then swap is not limited; a host without swap has none to use).
      writeOptional(join(dir, 'memory.memsw.limit_in_bytes'), String(memory));
    }
    if (limits && layout.cpu) {
      const cpus = limits.requestCpuMillis / 1000;
      const cap = limits.cpuMillis === null ? null : Math.max(MIN_QUOTA_US, Math.round((limits.cpuMillis / 1000) * CPU_PERIOD_US));
      if (layout.cpu === 'v2') {
        const dir = layout.v2!;
        writeCgroupFile(join(dir, 'cpu.weight'), String(Math.min(10_000, Math.max(1, Math.round(100 * cpus)))));
        if (cap !== null) writeCgroupFile(join(dir, 'cpu.max'), `${cap} ${CPU_PERIOD_US}`);
      } else {
        const dir = layout.v1.get('cpu')!;
        writeCgroupFile(join(dir, 'cpu.shares'), String(Math.max(2, Math.round(1024 * cpus))));
        if (cap !== null) {
          writeCgroupFile(join(dir, 'cpu.cfs_period_us'), String(CPU_PERIOD_US));
          writeCgroupFile(join(dir, 'cpu.cfs_quota_us'), String(cap));
        }
      }
    }
    if (layout.pids) {
      const dir = layout.pids === 'v2' ? layout.v2! : layout.v1.get('pids')!;
      writeCgroupFile(join(dir, 'pids.max'), String(limits?.pids ?? spec.pidsMax));
    }
    if (layout.devices) {
      const dir = layout.v1.get('devices')!;
      writeCgroupFile(join(dir, 'devices.deny'), 'a');
      const allow = join(dir, 'devices.allow');
      for (const rule of deviceAllowRules(layout.characterMajors, spec.gpuIndices)) writeCgroupFile(allow, rule, { append: true });
    }
  }

  private async freezeKillThaw(freezer: string): Promise<void> {
    const state = join(freezer, 'freezer.state');
    for (let round = 0; round < KILL_ROUNDS; round++) {
      writeCgroupFile(state, 'FROZEN');
      // FREEZING until every task has stopped; a task in an uninterruptible sleep can hold it there.
      const deadline = Date.now() + FREEZE_WAIT_MS;
      while (readCgroupFile(state)?.trim() !== 'FROZEN' && Date.now() < deadline) await sleep(POLL_MS);
      const n = this.signal('SIGKILL');
      writeCgroupFile(state, 'THAWED');
      if (n === 0 || (await this.waitEmpty(POLL_MS * 10))) return;
    }
  }
}

function checkSpec(attemptId: string, spec: AttemptCgroupSpec): void {
  for (const i of spec.gpuIndices) {
    if (!Number.isInteger(i) || i < 0 || i >= 254) {
      throw new RangeError(
        `attempt ${attemptId}: GPU index ${i} is not a minor of /dev/nvidia<N> (0 to 253; ${NVIDIA_MAJOR}:254 and 255 are nvidia-modeset and nvidiactl)`,
      );
    }
  }
  if (!Number.isInteger(spec.pidsMax) || spec.pidsMax < 1)
    throw new RangeError(`attempt ${attemptId}: pids limit ${spec.pidsMax} is not a positive whole number`);
}

/** A limit file that older kernels or hosts without swap accounting lack: skipped there. */
function writeOptional(file: string, value: string): void {
  try {
    writeCgroupFile(file, value);
  } catch (err) {
    // cgroupfs answers a write to a file it does not have with EACCES (it cannot create one).
    if (!existsSync(file)) return;
    throw err;
  }
}

function sendSignal(pid: number, signal: NodeJS.Signals): boolean {
  // Never the agent itself, whatever a cgroup lists (a wrong directory must not make it kill itself).
  if (pid === process.pid) return false;
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    // ESRCH: it exited since the list was read.
    return false;
  }
}

/**
 * Whether the attempt needs the devices rules: it has GPUs, or the host has NVIDIA device files it
 * must be kept from (their major in /proc/devices). A CPU attempt on a host without them has no
 * device to be kept from, and is spared a cgroup and two dozen writes (measured: 0.4 ms of the
 * agent's CPU a stage, bench/results/2026-12-03-containment-cost.md).
 */
function devicesNeeded(layout: AttemptCgroupLayout, spec: AttemptCgroupSpec): boolean {
  return layout.devices && (spec.gpuIndices.length > 0 || layout.characterMajors.includes(NVIDIA_MAJOR));
}

/** The layout without the devices hierarchy (its directory kept where another controller shares it). */
function withoutDevices(layout: AttemptCgroupLayout): AttemptCgroupLayout {
  const v1 = new Map(layout.v1);
  v1.delete('devices');
  return { ...layout, devices: false, v1 };
}

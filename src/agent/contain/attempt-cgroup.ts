/**
 * One attempt's cgroups, one directory per hierarchy the agent uses (cgroup-tree.ts decides which):
 * made and limited before the command starts (the command writes its own pid into each of
 * `procsFiles` before it execs, so nothing it forks was ever outside), then signaled, killed as a
 * whole, watched until empty, read for what it used, and removed, or emptied, reset and kept for
 * the next attempt (recycled: cgroup-tree.ts). docs/containment.md has the table of what is
 * written where, and "Recycled cgroups" why a recycled one is as good as a new one.
 *
 * Synchronous file calls: cgroupfs lives in memory, and an attempt's start costs a handful of
 * writes on the agent's hot path (about ten on v1 with the devices rules).
 */
import { mkdirSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import type { AttemptLimitsWire } from '../../api/contract/containment.js';
import type { ContainmentKill } from '../../api/contract/containment.js';
import { sleep } from '../../lib/sleep.js';
import { CgroupFileError, readCgroupFile, readKeyedValue, readNumber, readPids, writeCgroupFile } from './cgroup-file.js';
import type { CgroupSource, V1Controller } from './detect-cgroups.js';
import { writeCgroupLimits } from './cgroup-limits.js';
import { NVIDIA_MAJOR } from './v1-device-rules.js';

/** Where an attempt's cgroups are and what each is for (CgroupTree.layout). */
export interface AttemptCgroupLayout {
  attemptId: string;
  /** The directories' name under the agent's subtree: the attempt id of the attempt that made them (a recycled one keeps its first name). */
  name: string;
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
  /** The host's `nvidia-caps` major (MIG's capability files), null where it has none; absent: none. */
  nvidiaCapsMajor?: number | null;
}

/** What an attempt is limited to: its assignment's limits (null from a server before containment), the agent's default pids limit, its GPUs. */
export interface AttemptCgroupSpec {
  limits: AttemptLimitsWire | null;
  pidsMax: number;
  /** The minors of its GPUs' `/dev/nvidia<N>` (attempt-gpus.ts: a whole GPU's index, a MIG instance's parent's). */
  gpuIndices: readonly number[];
  /** The minors of its MIG devices' capability files, `all` where unknown (attempt-gpus.ts); absent: none (no MIG device). */
  nvidiaCaps?: readonly number[] | 'all';
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

/**
 * What a recycled cgroup's counters held when this attempt got it, subtracted from what usage()
 * reads: counters the kernel cannot reset (the OOM count; v2's `cpu.stat`, `memory.peak`). All
 * zero (`memoryPeakBytes` null) for a new cgroup, and wherever the kernel resets the counter (v1's
 * `memory.max_usage_in_bytes`, `cpuacct.usage`: written 0 when the cgroup is recycled).
 */
export interface CgroupBaseline {
  oomKills: number;
  cpuSeconds: number;
  /** v2's `memory.peak` when it was recycled: a peak no higher is some earlier attempt's, and this one's is not known. */
  memoryPeakBytes: number | null;
}

/** Which cgroup an attempt runs in when it is not the one named after it (a recycled one), and its baseline: journaled, so that a restart reads usage right. */
export interface CgroupRef {
  name: string;
  baseline: CgroupBaseline;
}

/**
 * A child a launcher forked into a spare's cgroups ahead of any job (docs/containment.md, "A child
 * waiting in a spare"): it joined them at the spare's release, and waits for the job of the
 * attempt the spare is handed to. Opaque here: what the launchers (launcher-pool.ts) need to find it.
 */
export interface PreparedChild {
  /** Which launcher holds it. */
  readonly launcher: number;
  /** Its name in that launcher's `prepare` and `job-in` lines. */
  readonly token: string;
}

/** Who prepares a child in a spare (the launchers: launcher-pool.ts); null where none can (no C launcher). */
export interface SparePreparer {
  prepare(procsFiles: readonly string[]): PreparedChild | null;
}

export const NEW_BASELINE: CgroupBaseline = { oomKills: 0, cpuSeconds: 0, memoryPeakBytes: null };

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

  /**
   * The limit files written, with their values (the devices rules as one entry, by the devices
   * directory): a recycled cgroup's next attempt writes only what differs, and resets what it does
   * not set. Empty for a cgroup reopened after a restart (never recycled: the sweep removes those).
   */
  private readonly written = new Map<string, string>();
  /** The counters as the last usage() read them (the cgroup empty by then): the next attempt's baseline, if it is recycled. */
  private lastRaw: CgroupBaseline | null = null;
  /** Made or recycled by this run of the agent, so every limit in it is in `written`: only such a cgroup may be recycled (one reopened after a restart holds limits nobody recorded). */
  private known = false;
  /** A read found it empty (foundEmpty). */
  private seenEmpty = false;
  /**
   * A launcher's child waiting in it, joined (CgroupTree.release); handed on by reuse() to the
   * attempt the spare goes to, whose start takes it (and clears it: launcher-pool.ts). Null: none.
   */
  prepared: PreparedChild | null = null;

  private constructor(
    readonly layout: AttemptCgroupLayout,
    /** What its counters held when this attempt got it (recycled), subtracted by usage(). */
    readonly baseline: CgroupBaseline = NEW_BASELINE,
  ) {
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
    const cg = new AttemptCgroup(AttemptCgroup.devicesNeeded(layout, spec) ? layout : withoutDevices(layout));
    const made: string[] = [];
    try {
      for (const dir of cg.dirs) {
        try {
          mkdirSync(dir);
          made.push(dir);
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          // Left by an agent that crashed between making it and recording the attempt: reused.
          if (code === 'EEXIST') continue;
          // The agent's own subtree is gone: an empty cgroup is removable by anyone who cleans
          // them up (a test run's teardown, an operator's script). Made again, plain: where it
          // carried settings of its own (controllers handed down on pure v2), the limits written
          // next fail and say which file, as before.
          if (code === 'ENOENT' && remake(dir)) {
            made.push(dir);
            continue;
          }
          throw new CgroupFileError(dir, code, `cannot create ${dir}: ${(err as Error).message}`);
        }
      }
      writeCgroupLimits(cg.layout, spec, null, cg.written);
      cg.known = true;
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

  /**
   * An attempt's cgroups as a previous run of the agent made them (a restart re-attaches; the
   * sweep kills). `baseline`: the one journaled with it when it was recycled.
   */
  static open(layout: AttemptCgroupLayout, baseline: CgroupBaseline = NEW_BASELINE): AttemptCgroup {
    return new AttemptCgroup(layout, baseline);
  }

  /**
   * Whether the attempt needs the devices rules: it has GPUs, or the host has NVIDIA device files
   * it must be kept from (their major, or MIG's `nvidia-caps`, in /proc/devices). A CPU attempt on a host without them has
   * no device to be kept from, and is spared a cgroup and two dozen writes (measured: 0.4 ms of
   * the agent's CPU a stage, bench/results/2026-12-03-containment-cost.md, in git at 94324a8).
   */
  static devicesNeeded(layout: AttemptCgroupLayout, spec: AttemptCgroupSpec): boolean {
    return layout.devices && (spec.gpuIndices.length > 0 || layout.characterMajors.includes(NVIDIA_MAJOR) || (layout.nvidiaCapsMajor ?? null) !== null);
  }

  /**
   * The cgroups of `previous` (an ended attempt's, empty and reset by recycled()) for the attempt
   * of `layout` (the same directories): only the limits that differ from the last attempt's are
   * written, and those it does not set go back to the kernel's default. Throws as create() does;
   * the cgroup is then the caller's to remove.
   */
  static reuse(previous: AttemptCgroup, layout: AttemptCgroupLayout, spec: AttemptCgroupSpec): AttemptCgroup {
    checkSpec(layout.attemptId, spec);
    const raw = previous.lastRaw;
    if (!raw || layout.name !== previous.layout.name) throw new Error(`cgroup ${previous.layout.name} was not made ready for reuse`);
    // A waiting child lived in it since the release, under the last attempt's limits (or the
    // host's OOM killer's choice): an OOM kill of that child is no kill of the new attempt's, so
    // the count is taken again now (found in review: a successful attempt reported oom-killed).
    const baseline = previous.prepared ? { ...raw, oomKills: oomKillCount(previous.layout) } : raw;
    const cg = new AttemptCgroup(layout, baseline);
    writeCgroupLimits(layout, spec, previous.written, cg.written);
    cg.known = true;
    // Its limits are written while the child waits, before the job is sent to it: the child's steps
    // and the exec run under them (docs/containment.md, "A child waiting in a spare").
    cg.prepared = previous.prepared;
    return cg;
  }

  get attemptId(): string {
    return this.layout.attemptId;
  }

  /** Its directories' name (a recycled cgroup's is the attempt's that made it). */
  get name(): string {
    return this.layout.name;
  }

  /** Journaled when it is not the attempt's own new cgroup, so that a restart finds it and reads its usage right. */
  get ref(): CgroupRef | null {
    return this.layout.name === this.layout.attemptId && this.baseline === NEW_BASELINE ? null : { name: this.layout.name, baseline: this.baseline };
  }

  /** Every process in it (any hierarchy: one that joined some before it failed counts too). */
  pids(): number[] {
    const all = new Set<number>();
    for (const f of this.procsFiles) for (const pid of readPids(f)) all.add(pid);
    return [...all];
  }

  /**
   * Whether any process is still in it: v2's `cgroup.events`, else every v1 `cgroup.procs`. v2's
   * alone is enough where there is one: a process joins the v2 cgroup first (`procsFiles` starts
   * with it) and only the agent, as root, could move it out, so one in any of the v1 cgroups is in
   * the v2 one too (a child as well: it is born where its parent is).
   */
  populated(): boolean {
    const { v2 } = this.layout;
    const populated = v2 ? readKeyedValue(join(v2, 'cgroup.events'), 'populated') === 1 : this.procsFiles.some((f) => readPids(f).length > 0);
    if (!populated) this.seenEmpty = true;
    return populated;
  }

  /**
   * Whether a read found it empty (its attempt's end: cgroup-kill.ts). It stays so: a process
   * enters an attempt's cgroup only by that attempt's launch (the command joins before its exec),
   * which comes before any read of it, and a child is born where its parent is. So the release
   * after the end need not read it again (CgroupTree.release).
   */
  get foundEmpty(): boolean {
    return this.seenEmpty;
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

  /**
   * What it used (read after it is empty, for the final figures): of a recycled cgroup, what its
   * counters moved by since it got it (`baseline`). v2's `memory.peak` cannot be reset: a peak
   * above the baseline's is this attempt's; one no higher may be an earlier attempt's, and is
   * reported unknown (null) rather than wrong.
   */
  usage(): CgroupUsage {
    const { layout, baseline } = this;
    let oomKills = 0;
    let memoryPeakBytes: number | null = null;
    let memoryLimitBytes: number | null = null;
    let cpuSeconds: number | null = null;
    let rawPeak: number | null = null;
    if (layout.memory === 'v2') {
      const dir = layout.v2!;
      oomKills = oomKillCount(layout);
      rawPeak = readNumber(join(dir, 'memory.peak'));
      memoryPeakBytes = rawPeak !== null && (baseline.memoryPeakBytes === null || rawPeak > baseline.memoryPeakBytes) ? rawPeak : null;
      const written = this.writtenLimit(join(dir, 'memory.max'));
      memoryLimitBytes = written !== undefined ? written : readNumber(join(dir, 'memory.max'));
    } else if (layout.memory === 'v1') {
      const dir = layout.v1.get('memory')!;
      oomKills = oomKillCount(layout);
      memoryPeakBytes = readNumber(join(dir, 'memory.max_usage_in_bytes'));
      const written = this.writtenLimit(join(dir, 'memory.limit_in_bytes'));
      const limit = written !== undefined ? written : readNumber(join(dir, 'memory.limit_in_bytes'));
      memoryLimitBytes = limit !== null && limit < UNLIMITED_V1 ? limit : null;
    }
    const cpuacct = layout.cpu === 'v1' ? layout.v1.get('cpuacct') : undefined;
    let rawCpu = 0;
    if (cpuacct) {
      const ns = readNumber(join(cpuacct, 'cpuacct.usage'));
      cpuSeconds = ns === null ? null : ns / 1e9;
    } else if (layout.v2) {
      // v2 counts CPU time in every cgroup, with or without its cpu controller.
      const us = readKeyedValue(join(layout.v2, 'cpu.stat'), 'usage_usec');
      rawCpu = us === null ? 0 : us / 1e6;
      cpuSeconds = us === null ? null : Math.max(0, rawCpu - baseline.cpuSeconds);
    }
    this.lastRaw = { oomKills, cpuSeconds: rawCpu, memoryPeakBytes: rawPeak };
    return { oomKills: Math.max(0, oomKills - baseline.oomKills), memoryPeakBytes, cpuSeconds, memoryLimitBytes };
  }

  /**
   * Made ready for another attempt, once its attempt's end is recorded and it was found empty
   * (CgroupTree.release): true when its counters are reset or baselined; false when they cannot
   * be (a reset refused, a cgroup reopened after a restart, whose limits nobody recorded), and it
   * must be removed instead. The counters v1 can reset are written 0
   * (`memory.max_usage_in_bytes`, `cpuacct.usage`); the others are read as they stand (by
   * usage(), or here), for the next attempt to subtract. Nothing joins a cgroup but by the
   * agent's own launches, and none is started into it until it is handed out: empty now is empty
   * then.
   */
  recycled(): boolean {
    if (!this.known) return false;
    const { layout } = this;
    if (this.lastRaw === null) this.usage();
    try {
      if (layout.memory === 'v1') writeCgroupFile(join(layout.v1.get('memory')!, 'memory.max_usage_in_bytes'), '0');
      const cpuacct = layout.cpu === 'v1' ? layout.v1.get('cpuacct') : undefined;
      if (cpuacct) writeCgroupFile(join(cpuacct, 'cpuacct.usage'), '0');
    } catch {
      return false;
    }
    return true;
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

  /**
   * The memory limit this run of the agent wrote into `file` (null: none; `max`, -1 or never
   * written), without reading it back; undefined when it cannot know (a cgroup reopened after a
   * restart, whose limits another run wrote: read then).
   */
  private writtenLimit(file: string): number | null | undefined {
    if (!this.known) return undefined;
    const v = this.written.get(file);
    return v !== undefined && /^\d+$/.test(v) ? Number(v) : null;
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

function sendSignal(pid: number, signal: NodeJS.Signals): boolean {
  // Never the agent itself, whatever a cgroup lists (a wrong directory must not make it kill itself),
  // nor a pid of 0 or below (a process group: a file that is no cgroup, as a test's fake, can say "0").
  if (pid === process.pid || !(pid > 0)) return false;
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    // ESRCH: it exited since the list was read.
    return false;
  }
}

/** The layout without the devices hierarchy (its directory kept where another controller shares it). */
function withoutDevices(layout: AttemptCgroupLayout): AttemptCgroupLayout {
  const v1 = new Map(layout.v1);
  v1.delete('devices');
  return { ...layout, devices: false, v1 };
}

/** Makes `dir` with its parents (the agent's subtree, gone); false when it still cannot be made. */
function remake(dir: string): boolean {
  try {
    mkdirSync(dir, { recursive: true });
    return true;
  } catch {
    return false;
  }
}

/** The kernel's count of OOM kills in the attempt's memory cgroup (v2 `memory.events`, v1 `memory.oom_control`), 0 without one. */
function oomKillCount(layout: AttemptCgroupLayout): number {
  if (layout.memory === 'v2') return readKeyedValue(join(layout.v2!, 'memory.events'), 'oom_kill') ?? 0;
  if (layout.memory === 'v1') return readKeyedValue(join(layout.v1.get('memory')!, 'memory.oom_control'), 'oom_kill') ?? 0;
  return 0;
}

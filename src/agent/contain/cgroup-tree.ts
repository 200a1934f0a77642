/**
 * The agent's own subtree in each cgroup hierarchy it uses: `gantry-<machine>/` under the agent's
 * cgroup, and under it one cgroup per attempt, `gantry-<machine>/<attemptId>/` (docs/containment.md,
 * "The agent's subtree"). Made by mkdir at start, where the agent can (root, or a delegated
 * subtree); a hierarchy where it cannot is left out, and the choice of what comes from where is
 * made again without it, so that what the agent reports is what it enforces.
 *
 * An attempt's cgroups are recycled, as its directory is (agent-state.ts): once its end is
 * recorded, an empty one is reset and kept (up to MAX_SPARES), and the next attempt gets it with
 * only the limits that differ written, instead of a mkdir in every hierarchy now and an rmdir
 * later (most of what cgroups cost the agent, and the kernel's costliest part: a memory cgroup
 * made and torn down). It keeps its first attempt's name; the attempt that gets it journals the
 * name and the counters' baseline (CgroupRef), so that a restart finds it. Spares do not outlive
 * the agent: the sweep at start removes every cgroup no re-attached attempt runs in.
 *
 * Pure v2 has the no-internal-processes rule: a cgroup that hands controllers to its children may
 * hold no process itself (the root excepted). So the agent moves itself into
 * `gantry-<machine>/agent/` and enables the controllers in its own cgroup's and in
 * `gantry-<machine>/`'s `cgroup.subtree_control`. Its own cgroup must hold no other process.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, type Dirent } from 'node:fs';
import { join } from 'node:path';
import { errorText } from '../../lib/error-text.js';
import { AttemptCgroup, type AttemptCgroupLayout, type AttemptCgroupSpec, type CgroupRef, type SparePreparer } from './attempt-cgroup.js';
import { readCgroupFile, readPids, writeCgroupFile } from './cgroup-file.js';
import {
  chooseCgroups,
  V2_CONTROLLERS,
  type CgroupChoice,
  type CgroupDetection,
  type V1Controller,
  type V1Hierarchy,
  type V2Hierarchy,
} from './detect-cgroups.js';
import { characterMajors } from './v1-device-rules.js';

/** Attempt ids and machine names become directory names: nothing that could climb out. */
const SAFE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;
/** The agent's own cgroup under its subtree on pure v2. */
const AGENT_CGROUP = 'agent';
/** How long the sweep waits for a killed attempt's cgroup to empty. */
const SWEEP_EMPTY_MS = 5000;
/** Emptied cgroups kept for reuse: about one per slot is enough to never make one anew (as agent-state.ts's spare directories). */
const MAX_SPARES = 64;
/** How long release() waits for what a kill left to go before it removes the cgroup instead. */
const RELEASE_EMPTY_MS = 1000;

/** What the agent enforces, after making its subtree: the final choice, every problem included. */
export type CgroupEnforcement = CgroupChoice;

export interface SweepResult {
  /** Attempt cgroups killed and removed. */
  removed: string[];
  /** Those that could not be: the attempt id and why. */
  failed: { attemptId: string; error: string }[];
}

export class CgroupTree {
  /** Ended attempts' cgroups, empty and reset, by whether they have a devices cgroup (a CPU attempt on a host without NVIDIA devices has none). */
  private readonly spares = new Map<boolean, AttemptCgroup[]>();
  /**
   * Who forks a child into each spare at its release, joined ahead of the next attempt's job
   * (the C launchers: docs/containment.md, "A child waiting in a spare"); null: none, every start joins.
   */
  preparer: SparePreparer | null = null;

  private constructor(
    /** What is enforced, and why not the rest. */
    readonly enforcement: CgroupEnforcement,
    /** `gantry-<machine>` in the v2 hierarchy, if used. */
    private readonly v2Base: string | null,
    /** `gantry-<machine>` in each v1 hierarchy used, by controller. */
    private readonly v1Base: ReadonlyMap<V1Controller, string>,
    private readonly majors: readonly number[],
    /** The `nvidia-caps` major (MIG's capability files), null where the host has none. */
    private readonly nvidiaCapsMajor: number | null = null,
  ) {}

  /**
   * Makes the subtree where the detection says to. `pid`: the agent's own (moved into
   * `gantry-<machine>/agent` on pure v2). `instance`: what tells apart two agents of one name on
   * one host, appended as `gantry-<machine>.<instance>` (agent-cgroups.ts: its data directory's).
   */
  static create(detection: CgroupDetection, opts: { machineName: string; hostRoot: string; pid?: number; instance?: string }): CgroupTree {
    const name = opts.instance ? `${opts.machineName}.${opts.instance}` : opts.machineName;
    const base = `gantry-${name}`;
    if (!SAFE_NAME.test(name)) throw new RangeError(`machine name "${name}" cannot name a cgroup directory`);
    const pid = opts.pid ?? process.pid;
    const problems = [...detection.problems];
    let v2: V2Hierarchy | null = detection.v2;
    const v1 = new Map(detection.v1);
    let v2Ready = false;
    const v1Ready = new Set<V1Hierarchy>();
    let choice: CgroupChoice;
    // Choose, make what the choice uses, and choose again without what could not be made, until
    // everything chosen is made (each round removes a hierarchy or makes one: a few rounds at most).
    for (;;) {
      choice = chooseCgroups({ v2, v1 });
      if (choice.v2 && v2 && !v2Ready) {
        v2 = prepareV2(v2, base, pid, problems);
        v2Ready = true;
        continue;
      }
      const unmade = [...choice.v1].map((c) => v1.get(c)!).find((h) => !v1Ready.has(h));
      if (!unmade) break;
      v1Ready.add(unmade);
      const dir = join(unmade.own, base);
      const error = makeDir(dir);
      if (error) {
        problems.push(`cannot create ${dir} (${error}): ${unmade.controllers.join(', ')} not used; ${NOT_ROOT_HINT}`);
        for (const [c, h] of v1) if (h === unmade) v1.delete(c);
      }
    }
    let majors: number[] = [];
    let nvidiaCapsMajor: number | null = null;
    if (choice.devices) {
      try {
        ({ majors, nvidiaCaps: nvidiaCapsMajor } = characterMajors(readFileSync(join(opts.hostRoot, 'proc/devices'), 'utf8')));
      } catch (err) {
        problems.push(`cannot read /proc/devices (${errorText(err)}): devices not restricted`);
        v1.delete('devices');
        choice = chooseCgroups({ v2, v1 });
      }
    }
    const v1Base = new Map<V1Controller, string>();
    for (const c of choice.v1) v1Base.set(c, join(v1.get(c)!.own, base));
    const enforcement: CgroupEnforcement = { ...choice, problems: [...problems, ...choice.problems] };
    return new CgroupTree(enforcement, choice.v2 && v2 ? join(v2.own, base) : null, v1Base, majors, nvidiaCapsMajor);
  }

  /**
   * The subtree an agent made, as it is, making and moving nothing: for whoever cleans up after an
   * agent stopped for good without doing it (SIGKILLed, its machine decommissioned), to sweep() and
   * removeEmpty() it. Only hierarchies where the subtree exists are used.
   */
  static existing(detection: CgroupDetection, opts: { machineName: string; instance?: string }): CgroupTree {
    const base = `gantry-${opts.instance ? `${opts.machineName}.${opts.instance}` : opts.machineName}`;
    const v2Dir = detection.v2 && join(detection.v2.own, base);
    const v2 = v2Dir && existsSync(v2Dir) ? { ...detection.v2!, kill: existsSync(join(v2Dir, 'cgroup.kill')) } : null;
    const v1 = new Map([...detection.v1].filter(([, h]) => existsSync(join(h.own, base))));
    const choice = chooseCgroups({ v2, v1 });
    const v1Base = new Map<V1Controller, string>();
    for (const c of choice.v1) v1Base.set(c, join(v1.get(c)!.own, base));
    return new CgroupTree(choice, choice.v2 && v2 ? join(v2.own, base) : null, v1Base, []);
  }

  /** Whether attempts get cgroups at all. */
  get active(): boolean {
    return this.v2Base !== null || this.v1Base.size > 0;
  }

  /**
   * An attempt's cgroups with its limits: a spare's (recycled) where one is kept, else made; null
   * when the agent uses none. Throws when they cannot be made (attempt-cgroup.ts). A spare found
   * not empty, or that takes the limits badly, is removed and the next tried: a recycled cgroup
   * is only ever handed out empty. `fresh`: made, never a spare (a start again after the first
   * one's cgroup was removed under it: launch-attempt.ts).
   */
  create(attemptId: string, spec: AttemptCgroupSpec, opts: { fresh?: boolean } = {}): AttemptCgroup | null {
    const layout = this.layout(attemptId, attemptId);
    if (!layout) return null;
    const needed = AttemptCgroup.devicesNeeded(layout, spec);
    const list = opts.fresh ? undefined : this.spares.get(needed);
    while (list?.length) {
      // One with a child waiting in it first, the longest kept (its child the likeliest to have
      // joined by now: a burst's releases and starts come together, and the launcher does not wait
      // for a child still joining); else the last kept, as before (docs/containment.md, "A child waiting in a spare").
      const oldest = list.findIndex((cg) => cg.prepared);
      const spare = list.splice(oldest >= 0 ? oldest : list.length - 1, 1)[0]!;
      try {
        // An empty cgroup is anyone's to rmdir, and cleaners do (a test run's teardown, a script
        // that tidies /sys/fs/cgroup): a spare whose directories went would be handed out with
        // nothing to join, and its attempt's start refused (spawn-failed). A stat a hierarchy.
        if (!spare.dirs.every((d) => existsSync(d))) throw new Error(`cgroup ${spare.name} was removed`);
        // Found empty twice when it was kept (release); nothing joins a cgroup but by the agent's
        // own launches, so this one read (v2's `populated`, or every v1 `cgroup.procs`) is a check.
        // A prepared one holds its launcher's waiting child and nothing else, by the same rule: not read.
        if (!spare.prepared && spare.populated()) throw new Error(`cgroup ${spare.name} is not empty`);
        return AttemptCgroup.reuse(spare, { ...spare.layout, attemptId }, spec);
      } catch {
        // Not fit to be reused (checked empty when it was kept: nothing should be in it): removed, the next one tried.
        discardSpare(spare);
      }
    }
    return AttemptCgroup.create(layout, spec);
  }

  /**
   * An ended attempt's cgroups, once its end is recorded: kept for the next attempt when empty
   * and reset, else removed (a process still in them is killed first, and waited for). Throws
   * (CgroupFileError) when they cannot be removed: the next start's sweep tries again.
   */
  async release(cg: AttemptCgroup): Promise<void> {
    // Its handle settled once a read found it empty (foundEmpty: nothing can have joined since), or
    // its kill gave up on a process in an uninterruptible sleep: read again then, and killed and
    // waited for if anything is left.
    let empty = cg.foundEmpty || !cg.populated();
    if (!empty) {
      await cg.killAll().catch(() => cg.signal('SIGKILL'));
      empty = await cg.waitEmpty(RELEASE_EMPTY_MS);
    }
    const needed = cg.layout.devices;
    if (empty && this.spareCount() < MAX_SPARES && cg.recycled()) {
      // Kept empty; then a launcher's child joins it, off any stage's path (the joins' wait for the
      // kernel's migration lock), and waits for the next attempt's job. Its counters were read above.
      cg.prepared = this.preparer?.prepare(cg.procsFiles) ?? null;
      const list = this.spares.get(needed);
      if (list) list.push(cg);
      else this.spares.set(needed, [cg]);
      return;
    }
    await cg.remove();
  }

  /**
   * An attempt's cgroups that a previous run of the agent made; null when it has none here.
   * `ref`: journaled with the attempt when it got a recycled cgroup (named after another attempt).
   */
  open(attemptId: string, ref: CgroupRef | null = null): AttemptCgroup | null {
    const layout = this.layout(ref?.name ?? attemptId, attemptId);
    if (!layout) return null;
    const cg = AttemptCgroup.open(layout, ref?.baseline);
    return cg.dirs.some((d) => existsSync(d)) ? cg : null;
  }

  /**
   * Kills and removes every attempt cgroup under the subtree that is not in `keep` (the names of
   * the cgroups the journal says attempts still run in): left by an agent that crashed, by one
   * whose attempt ended while it was down and that cannot be reported as running, or kept as a
   * spare by the previous run.
   */
  async sweep(keep: ReadonlySet<string>): Promise<SweepResult> {
    const result: SweepResult = { removed: [], failed: [] };
    this.spares.clear();
    for (const attemptId of this.attemptIds()) {
      if (keep.has(attemptId)) continue;
      const cg = AttemptCgroup.open(this.layout(attemptId, attemptId)!);
      try {
        await cg.killAll();
        if (!(await cg.waitEmpty(SWEEP_EMPTY_MS))) throw new Error(`still holds pids ${cg.pids().join(' ')} after a kill`);
        await cg.remove();
        result.removed.push(attemptId);
      } catch (err) {
        result.failed.push({ attemptId, error: errorText(err) });
      }
    }
    return result;
  }

  /**
   * Removes the spares, then the subtree itself where it is empty (an agent that stopped with
   * nothing left running); a directory that still holds something (an attempt left running, the
   * agent's own cgroup on pure v2) stays.
   */
  removeEmpty(): void {
    const spares = [...this.spares.values()].flat();
    this.spares.clear();
    for (const cg of spares) discardSpare(cg);
    for (const dir of this.baseDirs()) {
      try {
        rmdirSync(dir);
      } catch {
        // Not empty, or gone: kept for the next start, which sweeps it.
      }
    }
  }

  /**
   * The spares with a launcher's child waiting in them, killed and removed (the agent stopping,
   * after its launchers' stdin closed, which ends those children too): waited for, so that
   * removeEmpty() after it finds the subtree empty.
   */
  async dropPrepared(): Promise<void> {
    for (const [needed, list] of this.spares) {
      const prepared = list.filter((cg) => cg.prepared);
      this.spares.set(
        needed,
        list.filter((cg) => !cg.prepared),
      );
      await Promise.all(prepared.map(dropPreparedSpare));
    }
  }

  private spareCount(): number {
    let n = 0;
    for (const list of this.spares.values()) n += list.length;
    return n;
  }

  /** The cgroups `name` (an attempt id: the attempt that made them) for the attempt `attemptId`. */
  private layout(name: string, attemptId: string): AttemptCgroupLayout | null {
    if (!this.active) return null;
    for (const id of [name, attemptId])
      if (!SAFE_NAME.test(id) || id === AGENT_CGROUP) throw new RangeError(`attempt id "${id}" cannot name a cgroup directory`);
    const e = this.enforcement;
    const v1 = new Map<V1Controller, string>();
    for (const [c, base] of this.v1Base) v1.set(c, join(base, name));
    return {
      attemptId,
      name,
      v2: this.v2Base && join(this.v2Base, name),
      v1,
      memory: e.memory,
      cpu: e.cpu,
      pids: e.pids,
      devices: e.devices,
      kill: e.kill,
      characterMajors: this.majors,
      nvidiaCapsMajor: this.nvidiaCapsMajor,
    };
  }

  private baseDirs(): string[] {
    return [...new Set([...(this.v2Base ? [this.v2Base] : []), ...this.v1Base.values()])];
  }

  /** The attempt cgroups found in any hierarchy of the subtree. */
  private attemptIds(): string[] {
    const ids = new Set<string>();
    for (const dir of this.baseDirs()) {
      let entries: Dirent[];
      try {
        entries = readdirSync(dir, { withFileTypes: true });
      } catch {
        continue;
      }
      for (const e of entries) if (e.isDirectory() && e.name !== AGENT_CGROUP && SAFE_NAME.test(e.name)) ids.add(e.name);
    }
    return [...ids];
  }
}

/** A spare removed (found empty when it was kept: nothing to wait for); what cannot be is left to the next start's sweep. */
function removeSpare(cg: AttemptCgroup): void {
  for (const dir of [...cg.dirs].reverse()) {
    try {
      rmdirSync(dir);
    } catch {
      // Not empty after all, or gone: the sweep at the next start kills and removes it.
    }
  }
}

/** A spare no longer kept: removed now, or, holding a prepared child, once that child is killed and gone (not waited for here). */
function discardSpare(cg: AttemptCgroup): void {
  if (cg.prepared) void dropPreparedSpare(cg);
  else removeSpare(cg);
}

/** A spare holding a prepared child: the child killed (the launcher reaps it and forgets its token), waited for, the spare removed. */
async function dropPreparedSpare(cg: AttemptCgroup): Promise<void> {
  try {
    await cg.killAll();
    await cg.waitEmpty(RELEASE_EMPTY_MS);
  } catch {
    // Its kill refused or its directories gone: what is left is the next start's sweep's.
  }
  removeSpare(cg);
}

const NOT_ROOT_HINT = 'the agent must run as root, or in a cgroup delegated to its user (systemd: Delegate=yes)';

/**
 * Makes `gantry-<machine>` in the v2 hierarchy and enables there the controllers v2 offers.
 * Returns the hierarchy as usable now: null when the directory cannot be made; its controllers
 * those actually enabled; its kill known.
 */
function prepareV2(v2: V2Hierarchy, base: string, pid: number, problems: string[]): V2Hierarchy | null {
  const dir = join(v2.own, base);
  const error = makeDir(dir);
  if (error) {
    problems.push(`cannot create ${dir} (${error}): cgroup v2 not used; ${NOT_ROOT_HINT}`);
    return null;
  }
  const kill = v2.kill ?? existsSync(join(dir, 'cgroup.kill'));
  const wanted = V2_CONTROLLERS.filter((c) => v2.controllers.has(c));
  if (wanted.length === 0) return { ...v2, kill };
  if (!v2.ownIsRoot) {
    // No internal processes: the agent leaves its own cgroup for one below its subtree, and its
    // own cgroup must then be empty (anything else there keeps the controllers from being enabled).
    const others = readPids(join(v2.own, 'cgroup.procs')).filter((p) => p !== pid);
    if (others.length > 0) {
      problems.push(
        `the agent's cgroup ${v2.own} holds other processes (${others.slice(0, 5).join(', ')}${others.length > 5 ? ', …' : ''}), so it cannot hand ${wanted.join(', ')} to attempts (cgroup v2 allows no process beside child cgroups): run the agent alone in a cgroup of its own (systemd: Delegate=yes)`,
      );
      return { ...v2, controllers: new Set(), kill };
    }
    const agentDir = join(dir, AGENT_CGROUP);
    const moved = makeDir(agentDir) ?? tryWrite(join(agentDir, 'cgroup.procs'), String(pid));
    if (moved) {
      problems.push(`cannot move the agent into ${agentDir} (${moved}): ${wanted.join(', ')} not enforced by cgroup v2`);
      return { ...v2, controllers: new Set(), kill };
    }
  }
  const enabled = new Set<(typeof V2_CONTROLLERS)[number]>();
  for (const c of wanted) {
    const failed = enableController(v2.own, c) ?? enableController(dir, c);
    if (failed) problems.push(`cannot enable the ${c} controller for attempts (${failed}): ${c} not enforced by cgroup v2`);
    else enabled.add(c);
  }
  return { ...v2, controllers: enabled, kill };
}

/** `+<controller>` into `dir/cgroup.subtree_control`, unless it is there already; the error, or null. */
function enableController(dir: string, controller: string): string | null {
  const file = join(dir, 'cgroup.subtree_control');
  const current = readCgroupFile(file)?.trim().split(/\s+/) ?? [];
  if (current.includes(controller)) return null;
  // One controller a write, appended (cgroupfs ignores the offset): a fake tree keeps them all.
  try {
    writeCgroupFile(file, `+${controller}\n`, { append: true });
    return null;
  } catch (err) {
    return errorText(err);
  }
}

function makeDir(dir: string): string | null {
  try {
    mkdirSync(dir);
    return null;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return null;
    return errorText(err);
  }
}

function tryWrite(file: string, value: string): string | null {
  try {
    writeCgroupFile(file, value);
    return null;
  } catch (err) {
    return errorText(err);
  }
}

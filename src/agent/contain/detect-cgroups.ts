/**
 * Which cgroup hierarchies this host offers the agent, and which of them it uses for what
 * (docs/containment.md, "The cgroups"): read from `/proc/self/mountinfo` (where each hierarchy is
 * mounted, and which part of it this process sees) and `/proc/self/cgroup` (this process's own
 * cgroup in each). Each controller is taken from cgroup v2 where v2 offers it, else from v1, so a
 * pure v2 host uses v2, a v1 host v1, and a hybrid host both. Reading only: whether the agent may
 * create cgroups there is found by trying (cgroup-tree.ts), which then chooses again without what
 * it could not create.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import type { ContainmentKill, ContainmentMechanism } from '../../api/contract/containment.js';
import { errorText } from '../../lib/error-text.js';

/** The v1 controllers the agent uses: limits (memory, cpu, pids, devices), CPU time (cpuacct), the kill (freezer). */
export const V1_CONTROLLERS = ['memory', 'cpu', 'cpuacct', 'pids', 'freezer', 'devices'] as const;
export type V1Controller = (typeof V1_CONTROLLERS)[number];

/** The v2 controllers the agent enables for its attempts. */
export const V2_CONTROLLERS = ['memory', 'cpu', 'pids'] as const;
export type V2Controller = (typeof V2_CONTROLLERS)[number];

export interface V2Hierarchy {
  /** Where it is mounted (hostRoot included). */
  mount: string;
  /** This process's own cgroup in it: a directory at or under `mount`. */
  own: string;
  /** `own` is the hierarchy's root (or its namespace's): no `cgroup.kill` there, and no no-internal-processes rule. */
  ownIsRoot: boolean;
  /** What `own/cgroup.controllers` offers (of V2_CONTROLLERS): what can be enabled below it. */
  controllers: ReadonlySet<V2Controller>;
  /** Its cgroups have `cgroup.kill` (Linux 5.14); null: not known until a cgroup is made below a root, which has none. */
  kill: boolean | null;
}

export interface V1Hierarchy {
  mount: string;
  /** This process's own cgroup in it. */
  own: string;
  /** Every controller mounted together here (cpu and cpuacct often share one mount): they share directories. */
  controllers: readonly string[];
}

export interface CgroupHierarchies {
  v2: V2Hierarchy | null;
  /** By controller; co-mounted controllers map to the same hierarchy. */
  v1: ReadonlyMap<V1Controller, V1Hierarchy>;
}

export type CgroupSource = 'v2' | 'v1';

/** What the agent uses, and so what it enforces (the fields of ContainmentReport, with where each comes from). */
export interface CgroupChoice {
  mechanism: ContainmentMechanism;
  memory: CgroupSource | null;
  cpu: CgroupSource | null;
  pids: CgroupSource | null;
  /** Only on v1 (v2 would need an eBPF program). */
  devices: boolean;
  kill: ContainmentKill;
  /** The v2 hierarchy is used: for a controller, the kill, or an attempt's emptiness (`cgroup.events`). */
  v2: boolean;
  /** The v1 controllers used: those of the limits, cpuacct with cpu (CPU time), freezer for the kill. */
  v1: ReadonlySet<V1Controller>;
  /** Why something is not enforced, one sentence each. */
  problems: string[];
}

export interface CgroupDetection extends CgroupHierarchies {
  choice: CgroupChoice;
  /** What could not be read or made sense of on the host (before any choice). */
  problems: string[];
}

/** Reads the host under `hostRoot` (`/` on a host, a fake tree in tests) and chooses. */
export function detectCgroups(hostRoot: string): CgroupDetection {
  const problems: string[] = [];
  const mountinfoFile = join(hostRoot, 'proc/self/mountinfo');
  const cgroupFile = join(hostRoot, 'proc/self/cgroup');
  let mounts: Mount[];
  let own: OwnCgroups;
  try {
    mounts = parseMountinfo(readFileSync(mountinfoFile, 'utf8'));
    own = parseProcCgroup(readFileSync(cgroupFile, 'utf8'));
  } catch (err) {
    problems.push(`cannot read this process's cgroups (${errorText(err)}): nothing is contained`);
    const none = { v2: null, v1: new Map<V1Controller, V1Hierarchy>() };
    return { ...none, choice: chooseCgroups(none), problems };
  }

  let v2: V2Hierarchy | null = null;
  const v1 = new Map<V1Controller, V1Hierarchy>();
  for (const m of mounts) {
    if (m.fstype === 'cgroup2' && !v2) {
      if (own.v2 === null) {
        problems.push(`cgroup v2 is mounted at ${m.mountPoint} but ${cgroupFile} names no cgroup of this process in it`);
        continue;
      }
      // An agent that moved itself into gantry-<machine>/agent (pure v2, cgroup-tree.ts) and was
      // started again there: its own cgroup is the one it moved out of.
      const path = own.v2.replace(/\/gantry-[^/]+\/agent$/, '') || '/';
      const dir = ownDir(hostRoot, m, path);
      if (dir === null) {
        problems.push(outside('cgroup v2', m, path));
        continue;
      }
      v2 = v2Hierarchy(m, dir, hostRoot);
    } else if (m.fstype === 'cgroup') {
      const controllers = m.superOptions.filter((o) => o !== 'rw' && o !== 'ro' && !o.includes('='));
      for (const c of controllers) {
        if (!isV1Controller(c) || v1.has(c)) continue;
        const path = own.v1.get(c);
        if (path === undefined) {
          problems.push(`the v1 ${c} hierarchy is mounted at ${m.mountPoint} but ${cgroupFile} names no ${c} cgroup of this process`);
          continue;
        }
        const dir = ownDir(hostRoot, m, path);
        if (dir === null) {
          problems.push(outside(`the v1 ${c} hierarchy`, m, path));
          continue;
        }
        const h: V1Hierarchy = { mount: join(hostRoot, m.mountPoint), own: dir, controllers };
        for (const other of controllers) if (isV1Controller(other) && !v1.has(other)) v1.set(other, h);
      }
    }
  }
  const found = { v2, v1 };
  return { ...found, choice: chooseCgroups(found), problems };
}

/**
 * Each controller from v2 where v2 offers it, else from v1; the kill by `cgroup.kill` where the v2
 * hierarchy has it (even with no controller: a hybrid host's), else the v1 freezer, else by pid.
 */
export function chooseCgroups(h: CgroupHierarchies): CgroupChoice {
  const problems: string[] = [];
  const offered = (c: V2Controller & V1Controller): CgroupSource | null => (h.v2?.controllers.has(c) ? 'v2' : h.v1.has(c) ? 'v1' : null);
  const memory = offered('memory');
  const cpu = offered('cpu');
  const pids = offered('pids');
  const devices = h.v1.has('devices');
  const v2Offers = h.v2 ? ` (cgroup v2 at ${h.v2.mount} offers ${[...h.v2.controllers].join(', ') || 'no controller'})` : '';
  if (!memory) problems.push(`memory is not limited: no usable cgroup hierarchy has the memory controller${v2Offers}`);
  if (!cpu) problems.push(`CPU is not weighted nor capped: no usable cgroup hierarchy has the cpu controller${v2Offers}`);
  if (!pids) problems.push(`the number of processes is not limited: no usable cgroup hierarchy has the pids controller${v2Offers}`);
  if (!devices) {
    problems.push(
      h.v2
        ? "devices are not restricted: cgroup v2 would need an eBPF program, which the agent does not load; a stage's GPUs are only its CUDA_VISIBLE_DEVICES"
        : "devices are not restricted: no usable v1 devices hierarchy; a stage's GPUs are only its CUDA_VISIBLE_DEVICES",
    );
  }
  let kill: ContainmentKill = 'process-group';
  if (h.v2 && h.v2.kill !== false) kill = 'cgroup.kill';
  else if (h.v1.has('freezer')) kill = 'freezer';
  const usesV2 = kill === 'cgroup.kill' || memory === 'v2' || cpu === 'v2' || pids === 'v2';
  const v1 = new Set<V1Controller>();
  if (memory === 'v1') v1.add('memory');
  if (cpu === 'v1') {
    v1.add('cpu');
    // CPU time: v2's cpu.stat counts it in every cgroup, controller or not; cpuacct only without v2
    // (one cgroup fewer to make and remove a stage on a hybrid host).
    if (h.v1.has('cpuacct') && !usesV2) v1.add('cpuacct');
  }
  if (pids === 'v1') v1.add('pids');
  if (devices) v1.add('devices');
  if (kill === 'freezer') v1.add('freezer');
  if (kill === 'process-group') {
    problems.push(
      usesV2 || v1.size > 0
        ? "an attempt's processes are killed pid by pid until its cgroups are empty: there is no cgroup.kill (cgroup v2, Linux 5.14) nor v1 freezer to stop a fork loop first"
        : 'an attempt is killed by its process group: a process that leaves it (setsid, a daemon) outlives the attempt, since no cgroup holds it',
    );
  }
  const mechanism: ContainmentMechanism = usesV2 && v1.size > 0 ? 'cgroup-hybrid' : usesV2 ? 'cgroup-v2' : v1.size > 0 ? 'cgroup-v1' : 'none';
  return { mechanism, memory, cpu, pids, devices, kill, v2: usesV2, v1, problems };
}

export interface Mount {
  /** The part of the filesystem mounted (for a cgroup: the cgroup seen as the mount's root). */
  root: string;
  mountPoint: string;
  fstype: string;
  superOptions: string[];
}

/** `/proc/self/mountinfo`: "id parent major:minor root mountpoint options [optional…] - fstype source superoptions". */
export function parseMountinfo(text: string): Mount[] {
  const mounts: Mount[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const fields = line.split(' ');
    const dash = fields.indexOf('-', 6);
    if (dash < 0 || fields.length < dash + 4) continue;
    mounts.push({
      root: unescapeMountField(fields[3]!),
      mountPoint: unescapeMountField(fields[4]!),
      fstype: fields[dash + 1]!,
      superOptions: fields[dash + 3]!.split(','),
    });
  }
  return mounts;
}

/** Spaces, tabs, newlines and backslashes in mountinfo are octal escapes (`\040`). */
function unescapeMountField(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

interface OwnCgroups {
  v2: string | null;
  v1: Map<string, string>;
}

/** `/proc/self/cgroup`: "id:controllers:path"; v2's line is "0::path". */
function parseProcCgroup(text: string): OwnCgroups {
  const own: OwnCgroups = { v2: null, v1: new Map() };
  for (const line of text.split('\n')) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    const [, id, controllers, path] = m;
    if (id === '0' && controllers === '') own.v2 = path!;
    else for (const c of controllers!.split(',')) if (c !== '') own.v1.set(c, path!);
  }
  return own;
}

/** This process's cgroup directory in a mounted hierarchy; null when its path lies outside what the mount shows. */
function ownDir(hostRoot: string, m: Mount, path: string): string | null {
  const rel = posix.relative(m.root, path);
  if (rel.startsWith('..') || posix.isAbsolute(rel)) return null;
  return join(hostRoot, m.mountPoint, rel);
}

function outside(what: string, m: Mount, path: string): string {
  return `${what} is mounted at ${m.mountPoint} showing ${m.root}, which does not hold this process's cgroup ${path}: mount the hierarchy's root, or run the agent in a cgroup namespace`;
}

function v2Hierarchy(m: Mount, own: string, hostRoot: string): V2Hierarchy {
  let offered: string[] = [];
  try {
    offered = readFileSync(join(own, 'cgroup.controllers'), 'utf8').trim().split(/\s+/);
  } catch {
    // No such file: no controller offered (nothing to enable), the kill may still be there.
  }
  const controllers = new Set(V2_CONTROLLERS.filter((c) => offered.includes(c)));
  // A root cgroup has neither cgroup.type nor cgroup.kill: whether its children have cgroup.kill
  // is known once one is made.
  const ownIsRoot = !existsSync(join(own, 'cgroup.type'));
  const kill = existsSync(join(own, 'cgroup.kill')) ? true : ownIsRoot ? null : false;
  return { mount: join(hostRoot, m.mountPoint), own, ownIsRoot, controllers, kill };
}

function isV1Controller(c: string): c is V1Controller {
  return (V1_CONTROLLERS as readonly string[]).includes(c);
}

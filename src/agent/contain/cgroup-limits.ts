/**
 * An attempt's limit files (docs/containment.md, the table of what is written where): what its
 * spec sets, written into a new cgroup, or into a recycled one where it differs from the last
 * attempt's, with the kernel's default put back where the new attempt sets nothing.
 */
import { existsSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { AttemptCgroupLayout, AttemptCgroupSpec } from './attempt-cgroup.js';
import { writeCgroupFile } from './cgroup-file.js';
import { deviceAllowRules } from './v1-device-rules.js';

const CPU_PERIOD_US = 100_000;
/** The kernel's smallest CFS quota. */
const MIN_QUOTA_US = 1000;

/** The key under which `written` keeps the devices rules, all together. */
const DEVICES_KEY = 'devices.allow rules';

/** What a limit file holds when nothing was written to it: written back when a recycled cgroup's next attempt sets no such limit. */
const DEFAULTS: Readonly<Record<string, string>> = {
  'memory.max': 'max',
  'memory.swap.max': 'max',
  'memory.oom.group': '0',
  'cpu.weight': '100',
  'cpu.max': 'max 100000',
  'memory.limit_in_bytes': '-1',
  'memory.memsw.limit_in_bytes': '-1',
  'cpu.shares': '1024',
  'cpu.cfs_period_us': '100000',
  'cpu.cfs_quota_us': '-1',
  'pids.max': 'max',
};

/** One limit to write: `optional`, a file an older kernel or a host without swap accounting lacks. */
interface LimitWrite {
  file: string;
  value: string;
  optional?: boolean;
}

/**
 * Writes an attempt's limits into its cgroups and records each in `written` (file → value, the
 * devices rules as one entry): every one for a new cgroup (`previous` null); for a recycled one,
 * only those that differ from what `previous` (its last attempt's `written`) holds, and the
 * kernel's default into those this attempt does not set. Throws (a CgroupFileError naming the
 * file) when the kernel refuses one.
 */
export function writeCgroupLimits(
  layout: AttemptCgroupLayout,
  spec: AttemptCgroupSpec,
  previous: ReadonlyMap<string, string> | null,
  written: Map<string, string>,
): void {
  const writes = limitWrites(layout, spec);
  if (previous) {
    const now = new Set(writes.map((w) => w.file));
    // Reset first: a v1 memsw limit left below a new memory limit would refuse it.
    const resets: LimitWrite[] = [];
    for (const [file, value] of previous) {
      if (now.has(file) || file === DEVICES_KEY) continue;
      const def = DEFAULTS[basename(file)];
      if (def === undefined) throw new Error(`cannot reset ${file}: no default known`);
      if (value !== def) resets.push({ file, value: def });
    }
    // memsw (memory + swap) may never be below the memory limit: when it grows, memsw first.
    resets.sort(memswFirst);
    for (const w of resets) write(w, written);
    // Never written, or reset (-1): no limit, which any new one is below.
    const before = (file: string) => {
      const v = previous.get(file);
      return v === undefined || v === '-1' ? Infinity : Number(v);
    };
    const grows = writes.some((w) => w.file.endsWith('/memory.limit_in_bytes') && Number(w.value) > before(w.file));
    const ordered = grows ? [...writes].sort(memswFirst) : writes;
    for (const w of ordered) {
      if (previous.get(w.file) === w.value) written.set(w.file, w.value);
      else write(w, written);
    }
  } else {
    for (const w of writes) write(w, written);
  }
  if (layout.devices) {
    const dir = layout.v1.get('devices')!;
    const rules = deviceAllowRules(layout.characterMajors, spec.gpuIndices, layout.nvidiaCapsMajor ?? null, spec.nvidiaCaps ?? []);
    const key = rules.join('\n');
    if (previous?.get(DEVICES_KEY) !== key) {
      writeCgroupFile(join(dir, 'devices.deny'), 'a');
      const allow = join(dir, 'devices.allow');
      for (const rule of rules) writeCgroupFile(allow, rule, { append: true });
    }
    written.set(DEVICES_KEY, key);
  }
}

function write(w: LimitWrite, written: Map<string, string>): void {
  if (w.optional ? writeOptional(w.file, w.value) : (writeCgroupFile(w.file, w.value), true)) written.set(w.file, w.value);
}

/** The limit files and values of `spec`, in the order a new cgroup takes them (docs/containment.md, the table). */
function limitWrites(layout: AttemptCgroupLayout, spec: AttemptCgroupSpec): LimitWrite[] {
  const { limits } = spec;
  const out: LimitWrite[] = [];
  const memory = limits ? (limits.memoryBytes ?? limits.requestMemoryBytes) : null;
  if (memory !== null && layout.memory === 'v2') {
    const dir = layout.v2!;
    out.push({ file: join(dir, 'memory.max'), value: String(memory) });
    out.push({ file: join(dir, 'memory.swap.max'), value: '0', optional: true });
    // One process over the limit ends the attempt, not a random one of its processes.
    out.push({ file: join(dir, 'memory.oom.group'), value: '1' });
  } else if (memory !== null && layout.memory === 'v1') {
    const dir = layout.v1.get('memory')!;
    // The memory limit first: memsw may never be below it.
    out.push({ file: join(dir, 'memory.limit_in_bytes'), value: String(memory) });
    // Absent without swap accounting (then swap is not limited; a host without swap has none to use).
    out.push({ file: join(dir, 'memory.memsw.limit_in_bytes'), value: String(memory), optional: true });
  }
  if (limits && layout.cpu) {
    const cpus = limits.requestCpuMillis / 1000;
    const cap = limits.cpuMillis === null ? null : Math.max(MIN_QUOTA_US, Math.round((limits.cpuMillis / 1000) * CPU_PERIOD_US));
    if (layout.cpu === 'v2') {
      const dir = layout.v2!;
      out.push({ file: join(dir, 'cpu.weight'), value: String(Math.min(10_000, Math.max(1, Math.round(100 * cpus)))) });
      if (cap !== null) out.push({ file: join(dir, 'cpu.max'), value: `${cap} ${CPU_PERIOD_US}` });
    } else {
      const dir = layout.v1.get('cpu')!;
      out.push({ file: join(dir, 'cpu.shares'), value: String(Math.max(2, Math.round(1024 * cpus))) });
      if (cap !== null) {
        out.push({ file: join(dir, 'cpu.cfs_period_us'), value: String(CPU_PERIOD_US) });
        out.push({ file: join(dir, 'cpu.cfs_quota_us'), value: String(cap) });
      }
    }
  }
  if (layout.pids) {
    const dir = layout.pids === 'v2' ? layout.v2! : layout.v1.get('pids')!;
    out.push({ file: join(dir, 'pids.max'), value: String(limits?.pids ?? spec.pidsMax) });
  }
  return out;
}

/** v1's memsw limit before the memory limit (a stable sort: the rest keep their order). */
function memswFirst(a: LimitWrite, b: LimitWrite): number {
  return Number(b.file.endsWith('/memory.memsw.limit_in_bytes')) - Number(a.file.endsWith('/memory.memsw.limit_in_bytes'));
}

/** A limit file that older kernels or hosts without swap accounting lack: skipped there (false). */
function writeOptional(file: string, value: string): boolean {
  try {
    writeCgroupFile(file, value);
    return true;
  } catch (err) {
    // cgroupfs answers a write to a file it does not have with EACCES (it cannot create one).
    if (!existsSync(file)) return false;
    throw err;
  }
}

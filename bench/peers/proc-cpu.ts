/**
 * CPU time of other processes on this host, read from /proc (Linux only), so a bench can charge a
 * server (redis-server, postgres, a Gantry server or agent) for the CPU it spent over a run.
 * Figures are user + system time in ms, at the kernel's clock-tick resolution (10 ms).
 */
import { readdirSync, readFileSync } from 'node:fs';

// USER_HZ: 100 on every Linux build we run on (x86_64 and arm64); `getconf CLK_TCK` would say.
const CLOCK_TICKS_PER_S = 100;

/** utime + stime of `pid` in ms, or null when it is gone (or this is not Linux). */
export function processCpuMs(pid: number): number | null {
  // utime (field 14) and stime (field 15).
  return statTicksMs(pid, 14, 15);
}

/**
 * cutime + cstime of `pid` in ms: the CPU of its children that it has waited for (and theirs, once
 * they waited for theirs), or null when it is gone (or this is not Linux).
 */
export function reapedChildrenCpuMs(pid: number): number | null {
  // cutime (field 16) and cstime (field 17).
  return statTicksMs(pid, 16, 17);
}

/**
 * A process's CPU split by thread: its main thread (the one whose id is the pid: a Node process's
 * event loop, the JavaScript) as user and system time, and its other threads together (in Node,
 * V8's workers: the optimizing compiler's jobs and the garbage collector's helpers; libuv's pool),
 * in ms, or null when it is gone. A CPU profile (`--cpu-prof`) sees the main thread only.
 */
export function threadsCpuMs(pid: number): { mainUser: number; mainSystem: number; others: number } | null {
  const all = processCpuMs(pid);
  // The main thread's utime and stime from one read of its stat file.
  const main = statFields(`/proc/${pid}/task/${pid}/stat`);
  const user = main && ticksMs(main, 14);
  const system = main && ticksMs(main, 15);
  if (all === null || user === null || system === null) return null;
  return { mainUser: user, mainSystem: system, others: all - user - system };
}

/** The sum of two clock-tick fields of /proc/<pid>/stat (numbered as in proc(5)), in ms. */
function statTicksMs(pid: number, a: number, b: number): number | null {
  const fields = statFields(`/proc/${pid}/stat`);
  return fields && ticksMs(fields, a, b);
}

/** A stat file's fields from the third on (field n at n - 3), or null when it cannot be read (the process is gone). */
function statFields(path: string): string[] | null {
  let stat: string;
  try {
    stat = readFileSync(path, 'utf8');
  } catch {
    return null;
  }
  // Field 2 (comm) is in parentheses and may itself hold spaces or ')': split after the last ')'.
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** The sum of clock-tick fields (numbered as in proc(5)) of `statFields`' answer, in ms. */
function ticksMs(fields: readonly string[], ...numbers: number[]): number | null {
  const ticks = numbers.reduce((sum, n) => sum + Number(fields[n - 3]), 0);
  return Number.isFinite(ticks) ? (ticks * 1000) / CLOCK_TICKS_PER_S : null;
}

/**
 * CPU the whole machine spent (user, nice, system, irq, softirq of every core) in ms, from
 * /proc/stat; null off Linux. What a run costs in all: its processes, the ones they start (the
 * stages' `true`, shims, launchers), and the kernel's work for them (fsync, forks, pipes).
 */
export function machineCpuMs(): number | null {
  let line: string;
  try {
    line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!;
  } catch {
    return null;
  }
  const [user, nice, system, , , irq, softirq] = line.trim().split(/\s+/).slice(1).map(Number);
  const ticks = user! + nice! + system! + irq! + softirq!;
  return Number.isFinite(ticks) ? (ticks * 1000) / CLOCK_TICKS_PER_S : null;
}

/** The pids of `pid`'s children, whatever they run (an agent's launcher). */
export function childrenOf(pid: number): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(e));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** The pids whose /proc/<pid>/comm is exactly `comm` (the kernel keeps the first 15 bytes). */
export function pidsOfCommand(comm: string): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    try {
      if (readFileSync(`/proc/${e}/comm`, 'utf8').trimEnd() === comm) out.push(Number(e));
    } catch {
      // exited between readdir and read
    }
  }
  return out;
}

/** CPU ms of every live process named `comm`, by pid. */
export function cpuOfCommand(comm: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const pid of pidsOfCommand(comm)) {
    const ms = processCpuMs(pid);
    if (ms !== null) out.set(pid, ms);
  }
  return out;
}

/**
 * CPU spent by all processes named `comm` from now until `stop()`, including processes that start
 * in between (counted from zero, their whole life). The set is re-read every `everyMs`, so a
 * process that exits loses what it spent since its last reading (all of it if it lived less than
 * one interval): a lower bound when processes come and go, exact when they stay.
 */
export function trackCommandCpu(comm: string, everyMs = 200): { stop(): number } {
  const base = cpuOfCommand(comm);
  const last = new Map(base);
  const sample = () => {
    for (const [pid, ms] of cpuOfCommand(comm)) last.set(pid, ms);
  };
  const timer = setInterval(sample, everyMs);
  timer.unref();
  return {
    stop() {
      clearInterval(timer);
      sample();
      let total = 0;
      // A pid reused by a new process within the run would read lower than its base: count it whole.
      for (const [pid, ms] of last) total += ms >= (base.get(pid) ?? 0) ? ms - (base.get(pid) ?? 0) : ms;
      return total;
    },
  };
}

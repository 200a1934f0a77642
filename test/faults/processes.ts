/**
 * Process-level probes for the fault-injection suite, read from /proc (Linux): which stage
 * processes still run, by process group and by what is in their environment. Zombies count as
 * dead: a killed process whose parent has not reaped it yet runs nothing and holds no GPU.
 */
import { readdirSync, readFileSync } from 'node:fs';

interface ProcInfo {
  pid: number;
  pgrp: number;
  state: string;
}

function procs(): ProcInfo[] {
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return [];
  }
  const out: ProcInfo[] = [];
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.push({ pid: Number(name), state: f[0]!, pgrp: Number(f[2]) });
    } catch {
      // exited while we looked
    }
  }
  return out;
}

function environ(pid: number): Map<string, string> | null {
  try {
    const raw = readFileSync(`/proc/${pid}/environ`, 'utf8');
    return new Map(
      raw
        .split('\0')
        .filter(Boolean)
        .map((kv) => {
          const i = kv.indexOf('=');
          return [kv.slice(0, i), kv.slice(i + 1)] as [string, string];
        }),
    );
  } catch {
    return null;
  }
}

const live = (p: ProcInfo) => p.state !== 'Z' && p.state !== 'X';

/**
 * Whether a non-zombie process of group `pgid` runs for `attemptId` (its environment says
 * GANTRY_ATTEMPT_ID=attemptId, so that a reused pid is not mistaken for the attempt).
 */
export function attemptGroupAlive(pgid: number, attemptId: string): boolean {
  try {
    process.kill(-pgid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
  }
  if (process.platform !== 'linux') return true;
  return procs().some((p) => {
    if (p.pgrp !== pgid || !live(p)) return false;
    const env = environ(p.pid);
    return env === null || env.get('GANTRY_ATTEMPT_ID') === attemptId;
  });
}

/** Live processes whose environment has every `key=value` of `match` (e.g. this scenario's HISTORY). */
export function findProcesses(match: Record<string, string>): { pid: number; pgrp: number; env: Map<string, string> }[] {
  const res: { pid: number; pgrp: number; env: Map<string, string> }[] = [];
  for (const p of procs()) {
    if (!live(p) || p.pid === process.pid) continue;
    const env = environ(p.pid);
    if (env && Object.entries(match).every(([k, val]) => env.get(k) === val)) res.push({ pid: p.pid, pgrp: p.pgrp, env });
  }
  return res;
}

/** SIGKILLs process groups; returns those that existed. */
export function killGroups(pgids: Iterable<number>): number[] {
  const killed: number[] = [];
  for (const g of new Set(pgids)) {
    if (!Number.isInteger(g) || g <= 1) continue; // -0 and -1 would mean "my group" and "everything"
    try {
      process.kill(-g, 'SIGKILL');
      killed.push(g);
    } catch {
      // already gone
    }
  }
  return killed;
}

/**
 * CPU spent by one PostgreSQL cluster, found from a connection to it: its postmaster (the parent
 * of the backend that answers `pg_backend_pid()`) and every process under it, from /proc. Exact,
 * not sampled: a backend that exits is reaped by the postmaster at once, and its CPU moves into
 * the postmaster's cutime + cstime, which is counted too. Where the postmaster is not on this
 * host (or this is not Linux), every process named `postgres` is sampled instead (proc-cpu.ts:
 * a lower bound, and it mixes in any other cluster on the host).
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { childrenOf, processCpuMs, reapedChildrenCpuMs, trackCommandCpu } from './proc-cpu.js';

/** The parent pid of `pid` (field 4 of /proc/<pid>/stat), or null when it is not on this host. */
function parentOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return null;
  }
}

/** The CPU ms of the postmaster `pm` and all its processes, live and reaped, or null when it is gone. */
function treeCpuMs(pm: number): number | null {
  const own = processCpuMs(pm);
  const reaped = reapedChildrenCpuMs(pm);
  if (own === null || reaped === null) return null;
  return own + reaped + childrenOf(pm).reduce((ms, p) => ms + (processCpuMs(p) ?? 0), 0);
}

/** Starts counting the CPU of the cluster at `url`; `stop()` answers the ms spent since, and how it was counted. */
export async function trackPostgresCpu(url: string): Promise<{ stop(): number; how: 'postmaster' | 'sampled' }> {
  const client = new pg.Client({ connectionString: url });
  let postmaster: number | null = null;
  try {
    await client.connect();
    const backend = Number((await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid);
    postmaster = parentOf(backend);
  } finally {
    await client.end().catch(() => undefined);
  }
  const pm = postmaster;
  const base = pm === null ? null : treeCpuMs(pm);
  if (pm === null || base === null) {
    const sampled = trackCommandCpu('postgres');
    return { stop: () => sampled.stop(), how: 'sampled' };
  }
  return {
    how: 'postmaster',
    stop: () => (treeCpuMs(pm) ?? base) - base,
  };
}

/**
 * The agent's cgroups at its start (docs/containment.md): what the host offers, found and made
 * (detect-cgroups.ts, cgroup-tree.ts), or nothing when containment is off; the line the agent logs
 * about it; and the refusal to start under `--containment require` when memory, CPU, pids or the
 * kill is not enforced.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { cgroupJoinWait, type CgroupJoinWait } from './cgroup-join-wait.js';
import { CgroupTree, type CgroupEnforcement, type SweepResult } from './cgroup-tree.js';
import type { ContainmentOptions } from './containment-options.js';
import { detectCgroups } from './detect-cgroups.js';

export interface AgentCgroups {
  /** Where attempts' cgroups are made; null when none are (off, or nothing usable). */
  tree: CgroupTree | null;
  enforcement: CgroupEnforcement;
  /** Whether its attempts' first joins of a burst wait for an RCU grace period (favordynmods); null where attempts join no cgroup. */
  joinWait: CgroupJoinWait | null;
}

/** The agent refuses to start: containment is required and the host does not offer it all. */
export class ContainmentRequired extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ContainmentRequired';
  }
}

const OFF: CgroupEnforcement = {
  mechanism: 'none',
  memory: null,
  cpu: null,
  pids: null,
  devices: false,
  kill: 'process-group',
  v2: false,
  v1: new Set(),
  problems: ['containment is off (--containment off): attempts get no cgroups, and a process that leaves its process group outlives its attempt'],
};

/**
 * Finds and makes the agent's subtree. Its name carries the data directory's (a hash of its path):
 * the subtree belongs to the journal that says which of its attempts still run (the sweep kills
 * the rest), so two agents of one name on one host (tests, a misconfiguration) never sweep each
 * other's, while a restart with the same directory finds its own.
 */
export function setUpCgroups(opts: Pick<ContainmentOptions, 'mode' | 'hostRoot'>, machineName: string, dataDir: string): AgentCgroups {
  if (opts.mode === 'off') return { tree: null, enforcement: OFF, joinWait: null };
  const tree = CgroupTree.create(detectCgroups(opts.hostRoot), { machineName, hostRoot: opts.hostRoot, instance: instanceOf(dataDir) });
  checkRequired(opts.mode, tree.enforcement);
  if (!tree.active) return { tree: null, enforcement: tree.enforcement, joinWait: null };
  // Read again rather than carried out of detectCgroups: a second read of a small file at start, and detection stays about enforcement.
  return { tree, enforcement: tree.enforcement, joinWait: cgroupJoinWait(readFileSync(join(opts.hostRoot, 'proc/self/mountinfo'), 'utf8')) };
}

/**
 * After an agent stopped for good without removing its subtree (SIGKILLed; its data directory about
 * to go, so no later start will sweep it): kills what is left in its attempt cgroups and removes
 * them and the subtree. For supervisors and test harnesses; a restarted agent does this itself.
 */
export async function removeAgentCgroups(machineName: string, dataDir: string, hostRoot = '/'): Promise<SweepResult> {
  const tree = CgroupTree.existing(detectCgroups(hostRoot), { machineName, instance: instanceOf(dataDir) });
  const swept = await tree.sweep(new Set());
  tree.removeEmpty();
  return swept;
}

/** What tells apart the subtrees of agents of one name on one host: their data directories (`gantry-<machine>.<instance>`). */
export function instanceOf(dataDir: string): string {
  return createHash('sha256').update(resolve(dataDir)).digest('hex').slice(0, 8);
}

/** Under `require`: memory, CPU, pids and a kill of every process, or the agent does not start. */
function checkRequired(mode: ContainmentOptions['mode'], e: CgroupEnforcement): void {
  if (mode !== 'require') return;
  const missing = [!e.memory && 'memory', !e.cpu && 'CPU', !e.pids && 'pids', e.kill === 'process-group' && 'the kill of every process'].filter(
    (m): m is string => m !== false,
  );
  if (missing.length === 0) return;
  throw new ContainmentRequired(
    `containment is required (--containment require) but ${missing.join(', ')} cannot be enforced on this host: ${e.problems.join('; ')}`,
  );
}

/** One line for the agent's log: what is enforced, by what, and why the rest is not. */
export function describeCgroups(e: CgroupEnforcement): string {
  const on = [e.memory && `memory (${e.memory})`, e.cpu && `CPU (${e.cpu})`, e.pids && `pids (${e.pids})`, e.devices && 'devices (v1)'].filter(
    (x): x is string => typeof x === 'string',
  );
  const enforced = on.length ? `enforced: ${on.join(', ')}` : 'nothing enforced';
  const kill = `attempts killed by ${e.kill}`;
  const not = e.problems.length ? `; not enforced: ${e.problems.join('; ')}` : '';
  return `containment ${e.mechanism}: ${enforced}; ${kill}${not}`;
}

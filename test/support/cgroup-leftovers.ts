import { readdirSync, rmdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { liveAgentInstances } from './live-agents.js';

/**
 * Vitest's global setup: the agents' cgroup subtrees (`gantry-<machine>.<hash>`) that this test run
 * leaves behind are removed at its end. An agent removes its own subtree when it stops, but the
 * fault and restart tests kill agents hard (SIGKILL, a lost machine), and their data directories,
 * whose hash names the subtree, are gone once the test ends: no later agent ever sweeps them. Only
 * subtrees made during this run are touched (those present at its start are left alone, as another
 * Gantry on this host may own them), and only empty cgroups can be removed at all (rmdir refuses a
 * cgroup with a process), children before their parents. Nor those of an agent still running at
 * the end (a bench or `gantry up` started during the run, beside it): its empty cgroups are its
 * spares and the cgroups of starts under way, and removing them failed stages (`spawn-failed`,
 * docs/containment.md, "Recycled cgroups"). Live agents are found by their command lines
 * (live-agents.ts); where one's data directory is not on it, no subtree is removed this time.
 */
const ROOT = '/sys/fs/cgroup';
const DEPTH = 4;

function subtrees(): Set<string> {
  const found = new Set<string>();
  const walk = (dir: string, depth: number) => {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const n of names) {
      const p = join(dir, n);
      if (n.startsWith('gantry-')) {
        found.add(p);
        continue;
      }
      if (depth < DEPTH && isDir(p)) walk(p, depth + 1);
    }
  };
  walk(ROOT, 1);
  return found;
}

function isDir(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

/** Removes an empty cgroup tree bottom-up; a cgroup still holding a process stays (rmdir's EBUSY). */
function removeTree(dir: string): void {
  let names: string[] = [];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const n of names) {
    const p = join(dir, n);
    if (isDir(p)) removeTree(p);
  }
  try {
    rmdirSync(dir);
  } catch {
    // Busy (a process left in it) or already gone: not this teardown's to force.
  }
}

/** The subtrees made since `before` that no running agent owns, for the teardown to remove; none while an agent's cannot be told. */
export function leftovers(before: ReadonlySet<string>, now: Iterable<string>, live: { instances: ReadonlySet<string>; unnamed: readonly number[] }): string[] {
  if (live.unnamed.length > 0) return [];
  // `gantry-<machine>.<instance>`: the instance is what follows the last dot.
  return Array.from(now).filter((p) => !before.has(p) && !live.instances.has(basename(p).slice(basename(p).lastIndexOf('.') + 1)));
}

export default function setup(): () => void {
  const before = subtrees();
  return () => {
    for (const p of leftovers(before, subtrees(), liveAgentInstances())) removeTree(p);
  };
}

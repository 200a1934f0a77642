/**
 * More than one launcher (launcher.ts), each attempt given to the one with the fewest commands
 * still being started (docs/agent.md, "Two launchers, not one").
 *
 * Why: a launcher starts its commands one after another, and a contained start costs a few
 * milliseconds of wall on a loaded machine; under load an answer carries the next stages of many
 * chains at once, and the last of them waited for every spawn before it (the largest part of B
 * after A, measured: docs/throughput.md, "The agent's CPU a stage"). Two launchers start a burst on
 * two cores. Each launcher is whole on its own (its fallback to the next program, its jobs, kills,
 * ends and poll): a command stays with the launcher that started it.
 */
import { Launcher } from './launcher.js';
import type { LauncherProgram } from './launcher-programs.js';

/** How many launchers, from GANTRY_AGENT_LAUNCHERS (default 2). */
export function launcherCount(env: Readonly<Record<string, string | undefined>>): number {
  const v = env.GANTRY_AGENT_LAUNCHERS;
  if (v === undefined || v === '') return 2;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 8) throw new Error(`GANTRY_AGENT_LAUNCHERS must be a whole number from 1 to 8, not "${v}"`);
  return n;
}

export class LauncherPool {
  private readonly launchers: Launcher[];
  /** Where the search for the least busy starts: the one after the last chosen, so that ties alternate. */
  private next = 0;

  constructor(env: Readonly<Record<string, string>>, log: (line: string) => void, programs: readonly LauncherProgram[], count: number) {
    this.launchers = Array.from({ length: count }, () => new Launcher(env, log, programs));
  }

  /** The program that starts commands now (the first launcher's; each falls back on its own), or null when the caller spawns them. */
  get program(): LauncherProgram['name'] | null {
    for (const l of this.launchers) if (l.program) return l.program;
    return null;
  }

  /** As Launcher.run, on the launcher with the fewest commands being started; null when none can take it. */
  run(opts: Parameters<Launcher['run']>[0]): ReturnType<Launcher['run']> {
    const n = this.launchers.length;
    let best = -1;
    let least = Infinity;
    for (let k = 0; k < n; k++) {
      const i = (this.next + k) % n;
      const l = this.launchers[i]!;
      if (!l.program) continue;
      if (l.starting < least) {
        least = l.starting;
        best = i;
      }
    }
    if (best < 0) return null;
    this.next = (best + 1) % n;
    return this.launchers[best]!.run(opts);
  }

  close(): void {
    for (const l of this.launchers) l.close();
  }
}

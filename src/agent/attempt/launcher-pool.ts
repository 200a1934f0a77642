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
import type { PreparedChild, SparePreparer } from '../contain/attempt-cgroup.js';

/** How many launchers, from GANTRY_AGENT_LAUNCHERS (default 2). */
export function launcherCount(env: Readonly<Record<string, string | undefined>>): number {
  const v = env.GANTRY_AGENT_LAUNCHERS;
  if (v === undefined || v === '') return 2;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 8) throw new Error(`GANTRY_AGENT_LAUNCHERS must be a whole number from 1 to 8, not "${v}"`);
  return n;
}

export class LauncherPool implements SparePreparer {
  private readonly launchers: Launcher[];
  /** Where the search for the least busy starts: the one after the last chosen, so that ties alternate. */
  private next = 0;
  /** The launcher the next prepared child goes to: in turn, so that a burst's starts are shared as run() shares them. */
  private nextPrepare = 0;
  /** Names prepared children, unique over every launcher and its restarts. */
  private tokens = 0;

  constructor(env: Readonly<Record<string, string>>, log: (line: string) => void, programs: readonly LauncherProgram[], count: number) {
    this.launchers = Array.from({ length: count }, () => new Launcher(env, log, programs));
  }

  /** The program that starts commands now (the first launcher's; each falls back on its own), or null when the caller spawns them. */
  get program(): LauncherProgram['name'] | null {
    for (const l of this.launchers) if (l.program) return l.program;
    return null;
  }

  /**
   * A child forked into a spare's cgroups and joined to them, waiting for the next attempt's job
   * (docs/containment.md, "A child waiting in a spare"); null where no launcher runs the C program.
   */
  prepare(procsFiles: readonly string[]): PreparedChild | null {
    const n = this.launchers.length;
    for (let k = 0; k < n; k++) {
      const i = (this.nextPrepare + k) % n;
      const token = `p${++this.tokens}`;
      if (!this.launchers[i]!.prepare(token, procsFiles)) continue;
      this.nextPrepare = (i + 1) % n;
      return { launcher: i, token };
    }
    return null;
  }

  /**
   * As Launcher.run, on the launcher with the fewest commands being started; null when none can
   * take it. A cgroup with a prepared child goes to the launcher that holds it, as a `job-in` to
   * it (a launcher that lost it, restarted, starts the job plainly); the child is then used up.
   */
  run(opts: Parameters<Launcher['run']>[0]): ReturnType<Launcher['run']> {
    const prepared = opts.cgroup?.prepared ?? null;
    if (prepared && opts.cgroup) {
      opts.cgroup.prepared = null;
      const holder = this.launchers[prepared.launcher];
      if (holder?.program === 'c') return holder.run({ ...opts, prepared: prepared.token });
    }
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

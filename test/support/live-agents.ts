import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { instanceOf } from '../../src/agent/contain/agent-cgroups.js';

/**
 * The agents running on this host now, by the instance their cgroup subtrees are named with
 * (`gantry-<machine>.<instance>`, agent-cgroups.ts: a hash of the data directory's path), read
 * from each process's command line: `… main.js agent … --data-dir D` (what `gantry up`, the
 * benches and a user's shell start). `unnamed` counts the agents whose data directory the command
 * line does not give (the default depends on the host name's normalising), by pid: their subtrees
 * cannot be told from a dead agent's.
 */
export function liveAgentInstances(proc = '/proc'): { instances: Set<string>; unnamed: number[] } {
  const instances = new Set<string>();
  const unnamed: number[] = [];
  for (const pid of readdirSync(proc)) {
    if (!/^\d+$/.test(pid)) continue;
    let argv: string[];
    let cwd: string;
    try {
      argv = readFileSync(join(proc, pid, 'cmdline'), 'utf8').split('\0');
      cwd = readlinkSync(join(proc, pid, 'cwd'));
    } catch {
      continue; // gone meanwhile, or not ours to read
    }
    const at = argv.findIndex((a, i) => a === 'agent' && i > 0 && /(^|\/)(main\.js|gantry)$/.test(argv[i - 1]!));
    if (at < 0) continue;
    const dir = optionValue(argv.slice(at + 1), '--data-dir');
    if (dir === undefined) unnamed.push(Number(pid));
    else instances.add(instanceOf(resolve(cwd, dir)));
  }
  return { instances, unnamed };
}

function optionValue(args: string[], name: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === name) return args[i + 1];
    if (args[i]!.startsWith(`${name}=`)) return args[i]!.slice(name.length + 1);
  }
  return undefined;
}

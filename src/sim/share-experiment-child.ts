/**
 * One task of `runShareExperiment` in a process of its own (share-experiment.ts starts it by file):
 * a pod list × policy over seeds, one JSON line of `SeedFigures` on stdout after each seed, so
 * the parent can show progress while a task runs. The argument is the task as JSON.
 */
import type { SharePolicyName } from '../scheduler/share-policies.js';
import type { PodListName } from './alibaba-trace.js';
import { runPolicySeeds } from './share-experiment.js';

const task = JSON.parse(process.argv[2] ?? '{}') as { traceDir: string; list: PodListName; policy: SharePolicyName; seeds: number[] };
// The replays run synchronously, so a write to a parent gone (killed, Ctrl-C) fails only on a
// later tick that never comes before the last seed: look at the parent after each seed instead.
const parent = process.ppid;
runPolicySeeds(task.traceDir, task.list, task.policy, task.seeds, (s) => {
  if (process.ppid !== parent) process.exit(1);
  process.stdout.write(`${JSON.stringify(s)}\n`);
});

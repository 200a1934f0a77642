/**
 * One task of `runShareExperiment` in a process of its own (share-experiment.ts starts it by file):
 * a pod list × policy over seeds, one JSON line of `SeedFigures` on stdout after each seed, so
 * the parent can show progress while a task runs. The argument is the task as JSON.
 */
import type { SharePolicyName } from '../scheduler/share-policies.js';
import type { PodListName } from './alibaba-trace.js';
import { runPolicySeeds } from './share-experiment.js';

const task = JSON.parse(process.argv[2] ?? '{}') as { traceDir: string; list: PodListName; policy: SharePolicyName; seeds: number[] };
runPolicySeeds(task.traceDir, task.list, task.policy, task.seeds, (s) => process.stdout.write(`${JSON.stringify(s)}\n`));

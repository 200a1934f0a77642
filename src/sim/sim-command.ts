/**
 * `gantry sim`: the FGD paper's experiment on the Alibaba trace (share-experiment.ts) as a command
 * an operator runs before changing a policy: the table in the terminal, `--json` for scripts,
 * `--out DIR` for the JSON and a chart per pod list. Runs here, on this machine's cores, with no
 * server: the planner is the same pure code the server runs.
 */
import type { Command } from '@commander-js/extra-typings';
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { ValidationError } from '../spec/validation-error.js';
import { errorText } from '../lib/error-text.js';
import { DEFAULT_SHARE_POLICY, SHARE_POLICIES } from '../scheduler/share-policies.js';
import { NODE_LIST_FILE, POD_LIST_FILES, readNodeList, readPodList } from './alibaba-trace.js';
import { shareChartSvg } from './share-chart-svg.js';
import { runShareExperiment, type ShareExperiment, type ShareExperimentOptions } from './share-experiment.js';
import { gpuShareMachines, shareRequestOf } from './share-replay.js';
import { DEFAULT_POLICY_ALIAS, parseSimArgs, type SimArgs } from './sim-args.js';
import { shareTableText } from './share-table-text.js';

const HELP_AFTER = `
Replays the Alibaba GPU trace (the FGD paper's experiment, docs/scheduling.md): the trace's GPU
machines, the pod list shuffled with each seed and grown to 1.3 × the cluster's GPUs, pods placed
one at a time by the policy and never leaving. Prints the unallocated GPU % at an arrived workload
of 90, 95, 100, 110 and 130 %, mean of the seeds, beside the paper's figures. Lower is better.

Policies: ${DEFAULT_POLICY_ALIAS} (= ${DEFAULT_SHARE_POLICY}), ${SHARE_POLICIES.join(', ')}. Pod lists: ${Object.keys(POD_LIST_FILES).join(', ')}.

--out DIR writes sim.json (what --json prints) and sim-LIST.svg, a chart per pod list.
Progress goes to stderr (a live line on a terminal, a line per finished run otherwise).

Exit codes: 0 done, 1 a replay failed (a bug: the message says where), 2 a bad flag or trace
(unknown policy or list, bad seeds, no trace directory, a malformed trace file), naming the flag.

Examples:
  gantry sim --policy default,best-fit
  gantry sim --trace ~/traces/alibaba-gpu-2023 --lists default --seeds 42-44 --out sim-out
  gantry sim --policy packing --seeds 42,43 --json | jq '.runs[].unallocated'
`;

/** The trace's files, read once before any replay: a malformed one is the operator's input (exit 2), not a crash. */
function checkTrace(args: SimArgs): void {
  const at = (file: string, read: () => void) => {
    try {
      read();
    } catch (err) {
      throw new ValidationError([{ path: '--trace', message: `${join(args.traceDir, file)}: ${errorText(err)}` }]);
    }
  };
  at(NODE_LIST_FILE, () => {
    if (gpuShareMachines(readNodeList(args.traceDir)).length === 0) throw new Error('no machine with GPUs');
  });
  for (const list of args.lists) at(POD_LIST_FILES[list], () => void readPodList(list, args.traceDir).map(shareRequestOf));
}

type Progress = NonNullable<ShareExperimentOptions['onSeed']>;

/**
 * Progress on stderr: on a terminal one line redrawn (at most ten times a second); otherwise, for
 * logs, a plain line when a policy has run all its seeds on a list.
 */
function progress(args: SimArgs, stream: NodeJS.WriteStream): { onSeed: Progress; end: () => void } {
  const t0 = performance.now();
  const seconds = () => `${((performance.now() - t0) / 1000).toFixed(1)} s`;
  if (stream.isTTY) {
    let last = 0;
    const draw = (p: Parameters<Progress>[0]) => {
      const width = 24;
      const filled = Math.round((p.done / p.total) * width);
      const line = `gantry sim [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${p.done}/${p.total} replays · ${p.list} ${p.policy} seed ${p.seed} · ${seconds()}`;
      stream.write(`\r\x1b[2K${line.slice(0, Math.max(20, (stream.columns || 100) - 1))}`);
    };
    return {
      onSeed: (p) => {
        const now = performance.now();
        if (now - last < 100 && p.done < p.total) return;
        last = now;
        draw(p);
      },
      end: () => stream.write('\r\x1b[2K'),
    };
  }
  const left = new Map<string, number>();
  return {
    onSeed: (p) => {
      const key = `${p.list} ${p.policy}`;
      const n = (left.get(key) ?? args.seeds.length) - 1;
      left.set(key, n);
      if (n === 0)
        stream.write(`gantry sim: ${key}: ${args.seeds.length} seed${args.seeds.length === 1 ? '' : 's'} done (${p.done}/${p.total} replays, ${seconds()})\n`);
    },
    end: () => {},
  };
}

/** sim.json and a chart per list into `dir`; the paths written. */
function writeOut(dir: string, e: ShareExperiment): string[] {
  mkdirSync(dir, { recursive: true });
  const files = [join(dir, 'sim.json')];
  writeFileSync(files[0]!, `${JSON.stringify(e, null, 2)}\n`);
  for (const info of e.lists) {
    const file = join(dir, `sim-${info.list}.svg`);
    writeFileSync(
      file,
      shareChartSvg({ info, runs: e.runs.filter((r) => r.list === info.list), curveArrived: e.curveArrived, arrived: e.arrived, seeds: e.seeds }),
    );
    files.push(file);
  }
  return files;
}

export async function runSim(args: SimArgs): Promise<void> {
  checkTrace(args);
  const p = progress(args, process.stderr);
  let e: ShareExperiment;
  try {
    e = await runShareExperiment({ traceDir: args.traceDir, lists: args.lists, policies: args.policies, seeds: args.seeds, jobs: args.jobs, onSeed: p.onSeed });
  } finally {
    p.end();
  }
  if (args.json) process.stdout.write(`${JSON.stringify(e, null, 2)}\n`);
  else process.stdout.write(shareTableText(e));
  if (args.out !== null) {
    const files = writeOut(args.out, e);
    (args.json ? process.stderr : process.stdout).write(`written: ${files.join(', ')}\n`);
  }
}

export function simCommand(program: Command): void {
  program
    .command('sim')
    .description('Replay the Alibaba GPU trace with share placement policies: unallocated GPUs against arrived workload (before changing a policy)')
    .option('--trace <dir>', 'the trace directory (default: ../shared/traces/alibaba-gpu-2023 from here, when present)')
    .option('--policy <names>', `comma list of policies; "${DEFAULT_POLICY_ALIAS}" is ${DEFAULT_SHARE_POLICY} (default: all: ${SHARE_POLICIES.join(',')})`)
    .option('--seeds <seeds>', 'seeds: a range, a comma list or both (42-51, 42,43)', '42-51')
    .option('--lists <names>', 'comma list of pod lists', Object.keys(POD_LIST_FILES).join(','))
    .option('--out <dir>', 'also write sim.json and a chart per pod list (sim-LIST.svg) into this directory')
    .option('--jobs <n>', "replay processes at a time (default: this machine's cores; 1: in this process)")
    .option('--json', 'print the full figures as JSON (per list, policy and seed, with the curves) instead of the table')
    .addHelpText('after', HELP_AFTER)
    .exitOverride((err) => {
      // Commander exits 1 on a usage error; usage errors are 2 here, as everywhere in the CLI (exit 0 is --help).
      process.exit(err.exitCode === 0 ? 0 : 2);
    })
    .action(async (flags) => {
      await runSim(parseSimArgs(flags, process.cwd(), availableParallelism()));
    });
}

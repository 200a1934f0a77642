/**
 * `gantry sim`'s flags, read and checked before anything runs: every problem is a ValidationError
 * naming its flag (exit 2), so a typo costs no minute of replay. Pure but for the trace
 * directory's existence.
 */
import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { ValidationError } from '../spec/validation-error.js';
import { DEFAULT_SHARE_POLICY, isSharePolicy, SHARE_POLICIES, type SharePolicyName } from '../scheduler/share-policies.js';
import { ALIBABA_TRACE_RELATIVE_DIR, POD_LIST_FILES, type PodListName } from './alibaba-trace.js';
import { missingTraceFile } from './share-experiment.js';

/** The name that always means the default policy, whatever it is. */
export const DEFAULT_POLICY_ALIAS = 'default';

/** More seeds than this is a typo (`42-4200`), not an experiment: ten take tens of seconds. */
export const MAX_SEEDS = 1000;

export interface SimFlags {
  trace?: string;
  policy?: string;
  seeds?: string;
  lists?: string;
  out?: string;
  json?: boolean;
  jobs?: string;
}

export interface SimArgs {
  traceDir: string;
  policies: SharePolicyName[];
  seeds: number[];
  lists: PodListName[];
  out: string | null;
  json: boolean;
  jobs: number;
}

const problem = (flag: string, message: string) => new ValidationError([{ path: flag, message }]);

/** A comma list, trimmed, empty items refused. */
function items(flag: string, text: string): string[] {
  const parts = text.split(',').map((p) => p.trim());
  if (parts.some((p) => p === '')) throw problem(flag, `"${text}" has an empty item (a comma list, e.g. a,b)`);
  return parts;
}

/** `42-51`, `42,43`, `1,5-7`: distinct non-negative integers, in the order given. */
export function parseSeeds(text: string): number[] {
  const seeds: number[] = [];
  for (const part of items('--seeds', text)) {
    const range = part.split('-');
    const isInt = (s: string) => s.length > 0 && s.length <= 9 && [...s].every((c) => c >= '0' && c <= '9');
    if (range.length > 2 || !range.every(isInt)) throw problem('--seeds', `"${part}" is not a seed (a non-negative integer) or a range of them (42-51)`);
    const from = Number(range[0]);
    const to = Number(range[range.length - 1]);
    if (to < from) throw problem('--seeds', `"${part}" is an empty range (${from} > ${to})`);
    if (to - from + 1 + seeds.length > MAX_SEEDS) throw problem('--seeds', `more than ${MAX_SEEDS} seeds`);
    for (let s = from; s <= to; s++) {
      if (seeds.includes(s)) throw problem('--seeds', `seed ${s} is given twice`);
      seeds.push(s);
    }
  }
  return seeds;
}

/** Policy names as share-policies.ts exports them, `default` for the default one; each once. */
export function parsePolicies(text: string): SharePolicyName[] {
  const out: SharePolicyName[] = [];
  for (const name of items('--policy', text)) {
    const policy = name === DEFAULT_POLICY_ALIAS ? DEFAULT_SHARE_POLICY : name;
    if (!isSharePolicy(policy)) {
      throw problem('--policy', `unknown policy "${name}" (known: ${DEFAULT_POLICY_ALIAS} = ${DEFAULT_SHARE_POLICY}, ${SHARE_POLICIES.join(', ')})`);
    }
    if (!out.includes(policy)) out.push(policy);
  }
  return out;
}

export function parseLists(text: string): PodListName[] {
  const known = Object.keys(POD_LIST_FILES);
  const out: PodListName[] = [];
  for (const name of items('--lists', text)) {
    if (!known.includes(name)) throw problem('--lists', `unknown pod list "${name}" (known: ${known.join(', ')})`);
    if (!out.includes(name as PodListName)) out.push(name as PodListName);
  }
  return out;
}

function parseJobs(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > 256) throw problem('--jobs', `"${text}" is not a number of processes (1–256)`);
  return n;
}

/**
 * The trace directory: --trace, else `../shared/traces/alibaba-gpu-2023` from `cwd` when it is
 * there. It must hold the node list and the pod lists asked for.
 */
function traceDirOf(flag: string | undefined, cwd: string, lists: readonly PodListName[]): string {
  const dir = resolve(cwd, flag ?? ALIBABA_TRACE_RELATIVE_DIR);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) {
    if (flag === undefined) throw problem('--trace', `no trace directory at ${ALIBABA_TRACE_RELATIVE_DIR} (from ${cwd}); pass --trace DIR`);
    throw problem('--trace', `${dir} is not a directory`);
  }
  const missing = missingTraceFile(dir, lists);
  if (missing !== null) throw problem('--trace', `${dir} has no ${missing} (the trace's node list and pod lists: ${ALIBABA_TRACE_RELATIVE_DIR}/README.md)`);
  return dir;
}

export function parseSimArgs(flags: SimFlags, cwd: string, cores: number): SimArgs {
  // Every policy by default: what the operator would change to is among them.
  const policies = parsePolicies(flags.policy ?? SHARE_POLICIES.join(','));
  const seeds = parseSeeds(flags.seeds ?? '42-51');
  const lists = parseLists(flags.lists ?? Object.keys(POD_LIST_FILES).join(','));
  const jobs = flags.jobs === undefined ? Math.max(1, cores) : parseJobs(flags.jobs);
  const out = flags.out === undefined ? null : resolve(cwd, flags.out);
  if (out !== null && existsSync(out) && !statSync(out).isDirectory()) throw problem('--out', `${out} exists and is not a directory`);
  return { traceDir: traceDirOf(flags.trace, cwd, lists), policies, seeds, lists, out, json: flags.json === true, jobs };
}

/**
 * Job specs for the fault-injection suite. Every stage runs one small POSIX sh script that
 * appends JSON lines to $HISTORY (start, one input line per upstream, end via an EXIT trap),
 * prints a line at its start and end (each also kept in $HISTORY.wrote/<attempt id>.out|.err),
 * writes its attempt id to $GANTRY_OUTPUT_DIR/out.txt, then runs the scenario's `body`.
 * A TERM (cancel, timeout, lease lost) ends it with 143 and still writes the end line.
 */

export interface StageOpts {
  needs?: string[];
  /** sh run after the bookkeeping; default `sleep 0.3`. */
  body?: string;
  gpu?: number;
  cpu?: number;
  timeoutSeconds?: number;
  retry?: object;
  /** Ignore TERM from the script's first line (not only from `body`, which a loaded machine may reach after a short timeout). */
  ignoresTerm?: boolean;
}

const PRELUDE = [
  'now() { echo $(($(date +%s%N)/1000000)); }',
  // What the process writes to stdout and stderr, also kept beside the history ($HISTORY.wrote/),
  // so the checker can compare the server's log with it: say/warn for lines, or append to $WROTE.out
  // and $WROTE.err by hand for bulk output.
  'WROTE="$HISTORY.wrote/$GANTRY_ATTEMPT_ID"',
  `say() { printf '%s\\n' "$1"; printf '%s\\n' "$1" >> "$WROTE.out"; }`,
  `warn() { printf '%s\\n' "$1" >&2; printf '%s\\n' "$1" >> "$WROTE.err"; }`,
  // The attempt's process group (led by the agent's shim, the parent of this shell): field 5 of /proc/$$/stat.
  'read -r _ _ _ _ PG _ < /proc/$$/stat',
  // One printf per line: short lines appended with O_APPEND land whole.
  // A TERM to the group (a cancel, a timeout) kills the subshell of `$(now)` too: ask again until it
  // answers (this shell's own TERM trap waits for the line), so a line is whole whenever it lands.
  `h() { t=; while [ -z "$t" ]; do t=$(now); done; printf '{"ev":"%s","job":"%s","stage":"%s","attempt":%s,"attemptId":"%s","machine":"%s","gpus":"%s","pid":%s,"t":%s%s}\\n' "$1" "$GANTRY_JOB_ID" "$GANTRY_STAGE" "$GANTRY_ATTEMPT" "$GANTRY_ATTEMPT_ID" "$GANTRY_MACHINE" "$CUDA_VISIBLE_DEVICES" "$PG" "$t" "$2" >> "$HISTORY"; }`,
  `trap 'c=$?; say "end $c"; h end ",\\"code\\":$c"' EXIT`,
  `trap 'exit 143' TERM`,
  'h start',
  'say "start $GANTRY_ATTEMPT_ID"',
  'warn "on $GANTRY_MACHINE"',
];

export function stageCommand(upstreams: string[], body: string, ignoresTerm = false): string[] {
  const reads = upstreams.map((u) => `r=$(cat "$GANTRY_INPUT_DIR/${u}/out.txt"); h input ",\\"from\\":\\"${u}\\",\\"read\\":\\"$r\\""; [ -n "$r" ] || exit 66`);
  const prelude = ignoresTerm ? ["trap '' TERM", ...PRELUDE.filter((l) => l !== "trap 'exit 143' TERM")] : PRELUDE;
  return ['sh', '-c', [...prelude, ...reads, 'echo "$GANTRY_ATTEMPT_ID" > "$GANTRY_OUTPUT_DIR/out.txt"', body].join('\n')];
}

export function stage(history: string, name: string, o: StageOpts = {}) {
  const needs = o.needs ?? [];
  return {
    name,
    ...(needs.length ? { needs } : {}),
    resources: { cpu: o.cpu ?? 1, memory: '64Mi', ...(o.gpu ? { gpu: { count: o.gpu, type: 'h100' } } : {}) },
    env: { HISTORY: history },
    command: stageCommand(needs, o.body ?? 'sleep 0.3', o.ignoresTerm),
    ...(o.timeoutSeconds !== undefined ? { timeoutSeconds: o.timeoutSeconds } : {}),
    ...(o.retry ? { retry: o.retry } : {}),
  };
}

export const FAST_RETRY = { maxAttempts: 2, backoff: { initialSeconds: 1, maxSeconds: 1 } };

export function job(name: string, stages: object[], extra: object = {}) {
  return { name, retry: FAST_RETRY, ...extra, stages };
}

/** prep → train (GPU) → eval: the shape most scenarios run. */
export function pipeline(history: string, name: string, o: { trainBody?: string; gpu?: number } = {}) {
  return job(name, [
    stage(history, 'prep', { body: 'sleep 0.2' }),
    stage(history, 'train', { needs: ['prep'], gpu: o.gpu ?? 2, body: o.trainBody ?? 'sleep 2' }),
    stage(history, 'eval', { needs: ['train'], body: 'sleep 0.2' }),
  ]);
}

/** The same seed, the same scenario: the PRNG the chaos bus uses. */
export { seededRandom as seeded } from '../../src/lib/seeded-random.js';

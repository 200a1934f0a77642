/**
 * The invariant checker of the fault-injection suite: a pure function over what the API says
 * (jobs with stages and attempts), what every process did (the JSON-lines history written by the
 * stage script and by the harness), the committed artifacts' contents, and a liveness probe.
 * It returns every violation it finds; a scenario passes only when the list is empty.
 */
import type { JobView } from '../../src/api/contract/job-view.js';

/** A line written by a stage process (see stage-script.ts). */
export interface ProcLine {
  ev: 'start' | 'end' | 'input';
  job: string;
  stage: string;
  attempt: number;
  attemptId: string;
  machine: string;
  /** CUDA_VISIBLE_DEVICES as the process saw it: "0,1", or "" for a CPU stage. */
  gpus: string;
  /** The attempt's process group id (its leader is the agent's shim, the shell's parent). */
  pid: number;
  t: number;
  /** end: the exit status the EXIT trap saw. */
  code?: number;
  /** input: the upstream stage it read, and what its out.txt said (the upstream attempt id). */
  from?: string;
  read?: string;
}

/** A line written by the harness: what it did to the system, and when (ms). */
export interface HarnessLine {
  ev: 'harness';
  what: string;
  t: number;
  job?: string;
  machine?: string;
  /** kill-machine / kill-groups: the process groups it SIGKILLed. */
  pids?: number[];
  [k: string]: unknown;
}

export type HistoryLine = ProcLine | HarnessLine;

export interface CheckInput {
  jobs: JobView[];
  history: HistoryLine[];
  /** `${jobId}/${stage}` → the committed out.txt's content, or null when it could not be read. */
  artifacts: Map<string, string | null>;
  /** Attempt id → what its process wrote to each stream (the stage script keeps a copy), for the attempts that kept one. */
  wrote: Map<string, { stdout: string; stderr: string }>;
  /** Attempt id → the log the server serves for it, per stream (succeeded attempts). */
  logs: Map<string, { stdout: string; stderr: string }>;
  /** Whether anything of process group `pgid` started for `attemptId` is still running (zombies are dead). */
  alive: (pgid: number, attemptId: string) => boolean;
  /** When the check runs (ms); the end of an interval whose process never reported its end. */
  now: number;
  /** The kill grace the cluster ran with, plus slack: a canceled attempt's process must end within it. */
  cancelBoundMs: number;
  /** The cluster's heartbeat period: what an attempt started at placement may run longer after a
   *  cancel (docs/failure-detection.md, "Started at placement"). Absent: 0. */
  heartbeatMs?: number;
}

export interface Violation {
  invariant: string;
  detail: string;
}

const TERMINAL_JOB = new Set(['succeeded', 'failed', 'canceled']);
const ACTIVE_ATTEMPT = new Set(['scheduled', 'running']);

type Attempt = JobView['stages'][number]['attempts'][number];
interface AttemptRef {
  job: JobView;
  stage: JobView['stages'][number];
  attempt: Attempt;
}

export function checkInvariants(input: CheckInput): Violation[] {
  const out: Violation[] = [];
  const v = (invariant: string, detail: string) => out.push({ invariant, detail });
  const procs = input.history.filter((l): l is ProcLine => l.ev !== 'harness');
  const harness = input.history.filter((l): l is HarnessLine => l.ev === 'harness');

  const attempts = new Map<string, AttemptRef>();
  for (const job of input.jobs) for (const stage of job.stages) for (const attempt of stage.attempts) attempts.set(attempt.id, { job, stage, attempt });
  const starts = new Map<string, ProcLine>();
  const ends = new Map<string, ProcLine>();
  for (const l of procs) {
    if (l.ev === 'start') {
      if (starts.has(l.attemptId))
        v('attempt-ran-once', `attempt ${l.attemptId} (${l.job}/${l.stage}) started two processes: pids ${starts.get(l.attemptId)!.pid} and ${l.pid}`);
      else starts.set(l.attemptId, l);
    }
    if (l.ev === 'end') ends.set(l.attemptId, l);
  }

  // Every job terminal.
  for (const job of input.jobs) if (!TERMINAL_JOB.has(job.state)) v('job-terminal', `job ${job.id} (${job.name}) is ${job.state}`);

  // At most one committed output per stage, and only from the current, succeeded attempt.
  for (const job of input.jobs) {
    for (const stage of job.stages) {
      const where = `${job.id}/${stage.name}`;
      const succeeded = stage.attempts.filter((a) => a.state === 'succeeded');
      if (succeeded.length > 1)
        v('one-succeeded-attempt', `${where}: ${succeeded.length} succeeded attempts (${succeeded.map((a) => `#${a.number} ${a.id}`).join(', ')})`);
      const committed = stage.outputAttemptId;
      if (committed !== null) {
        const att = stage.attempts.find((a) => a.id === committed);
        if (!att) v('output-from-current-attempt', `${where}: outputAttemptId ${committed} is not an attempt of the stage`);
        else if (att.state !== 'succeeded')
          v('output-from-current-attempt', `${where}: outputAttemptId ${committed} (#${att.number}) is ${att.state}, not succeeded`);
        const content = input.artifacts.get(where);
        if (content === undefined || content === null) v('committed-artifact', `${where}: committed out.txt of ${committed} cannot be read`);
        else if (content.trim() !== committed)
          v('committed-artifact', `${where}: committed out.txt says ${JSON.stringify(content.trim())}, outputAttemptId is ${committed}`);
        const start = starts.get(committed);
        const end = ends.get(committed);
        if (!start || !end || end.code !== 0)
          v(
            'committed-attempt-ran',
            `${where}: committed attempt ${committed} has ${start ? '' : 'no start, '}${end ? `end code ${end.code}` : 'no end'} in the history`,
          );
      }
      if (succeeded.length === 1 && committed !== succeeded[0]!.id)
        v('output-pointer', `${where}: attempt ${succeeded[0]!.id} succeeded but outputAttemptId is ${committed}`);
      if (stage.state === 'succeeded' && committed === null) v('output-pointer', `${where}: stage succeeded with no committed output`);
    }
  }

  // Every succeeded attempt's log is what its process wrote: no byte lost, none twice.
  for (const [id, logged] of input.logs) {
    const wrote = input.wrote.get(id);
    const ref = attempts.get(id);
    if (!wrote || !ref || ref.attempt.state !== 'succeeded') continue;
    for (const stream of ['stdout', 'stderr'] as const) {
      if (logged[stream] === wrote[stream]) continue;
      v('log-is-output', `${ref.job.id}/${ref.stage.name} #${ref.attempt.number} (${id}) ${stream}: ${describeDifference(wrote[stream], logged[stream])}`);
    }
  }

  // A succeeded downstream attempt read the upstream's committed output.
  for (const l of procs) {
    if (l.ev !== 'input') continue;
    const ref = attempts.get(l.attemptId);
    if (!ref || ref.attempt.state !== 'succeeded') continue;
    const up = ref.job.stages.find((s) => s.name === l.from);
    if (!up || up.outputAttemptId !== l.read) {
      v(
        'input-is-committed',
        `${ref.job.id}/${ref.stage.name} attempt ${l.attemptId} succeeded after reading ${l.from}=${JSON.stringify(l.read)}, but ${l.from}'s committed attempt is ${up?.outputAttemptId ?? 'none'}`,
      );
    }
  }

  // Every process in the history belongs to an attempt the database knows.
  for (const s of starts.values())
    if (!attempts.has(s.attemptId)) v('history-attempt-known', `process ${s.pid} ran attempt ${s.attemptId} (${s.job}/${s.stage}), unknown to the database`);

  // No two processes on one machine held one GPU at the same time (real processes, from the history).
  const killedAt = new Map<number, number>();
  for (const h of harness) for (const pid of h.pids ?? []) if (!killedAt.has(pid)) killedAt.set(pid, h.t);
  const procIntervals = [...starts.values()].map((s) => ({
    key: `process ${s.pid} of ${s.job}/${s.stage} #${s.attempt}`,
    machine: s.machine,
    gpus: devices(s.gpus),
    from: s.t,
    to: ends.get(s.attemptId)?.t ?? killedAt.get(s.pid) ?? finishedIfObserved(attempts.get(s.attemptId)) ?? input.now,
  }));
  for (const [a, b] of overlaps(procIntervals))
    v('gpu-exclusive-history', `${a.key} [${a.from}, ${a.to}] and ${b.key} [${b.from}, ${b.to}] overlap on ${a.machine} GPU ${shared(a.gpus, b.gpus)}`);

  // ... nor, by the database, two attempts that were not lost or canceled.
  const dbIntervals = [...attempts.values()]
    .filter(({ attempt: a }) => a.gpus.length > 0 && a.state !== 'lost' && a.state !== 'canceled')
    .map(({ job, stage, attempt: a }) => ({
      key: `attempt ${a.id} (${job.id}/${stage.name} #${a.number}, ${a.state})`,
      machine: a.machineId,
      gpus: a.gpus,
      from: a.startedAt ?? a.scheduledAt,
      to: a.finishedAt ?? input.now,
    }));
  for (const [a, b] of overlaps(dbIntervals))
    v('gpu-exclusive-db', `${a.key} [${a.from}, ${a.to}] and ${b.key} [${b.from}, ${b.to}] overlap on machine ${a.machine} GPU ${shared(a.gpus, b.gpus)}`);

  // Cancel wins: nothing starts after the cancel, and what ran ends within the kill grace (one
  // heartbeat period more for an attempt started at placement: it runs at most until then).
  for (const job of input.jobs) {
    if (job.state !== 'canceled' || job.cancelRequestedAt === null) continue;
    const at = job.cancelRequestedAt;
    for (const stage of job.stages) {
      for (const a of stage.attempts) {
        const where = `${job.id}/${stage.name} #${a.number} (${a.id})`;
        if (a.startedAt !== null && a.startedAt > at) v('cancel-no-new-start', `${where} started at ${a.startedAt}, after the cancel at ${at}`);
        const start = starts.get(a.id);
        if (a.startedAt === null && start) v('cancel-no-new-start', `${where} was never acknowledged, yet process ${start.pid} ran it at ${start.t}`);
        const end = ends.get(a.id)?.t ?? (start ? killedAt.get(start.pid) : undefined);
        // Started at placement (its start is its placement: one transaction), its process may start
        // after the cancel, its agent told to kill it only on the heartbeat that first lists it.
        const bound = input.cancelBoundMs + (a.startedAt !== null && a.startedAt === a.scheduledAt ? (input.heartbeatMs ?? 0) : 0);
        if (start && end !== undefined && end > Math.max(at, start.t) + bound) {
          v('cancel-kills-in-time', `${where}: process ${start.pid} ended at ${end}, ${end - Math.max(at, start.t)} ms after the cancel (bound ${bound} ms)`);
        }
      }
    }
  }

  // No process of an ended attempt still runs (lost and canceled ones above all).
  for (const s of starts.values()) {
    const ref = attempts.get(s.attemptId);
    if (ref && ACTIVE_ATTEMPT.has(ref.attempt.state)) continue;
    if (input.alive(s.pid, s.attemptId))
      v('no-leftover-process', `process group ${s.pid} of ${s.job}/${s.stage} #${s.attempt} (${ref?.attempt.state ?? 'unknown attempt'}) still runs`);
  }
  return out;
}

/** Where the server's log first differs from what the process wrote. */
export function describeDifference(wrote: string, logged: string): string {
  let i = 0;
  while (i < wrote.length && i < logged.length && wrote[i] === logged[i]) i++;
  const at = (t: string) => JSON.stringify(t.slice(i, i + 40));
  return `the process wrote ${wrote.length} characters, the log has ${logged.length}; first difference at ${i}: wrote ${at(wrote)}, logged ${at(logged)}`;
}

/** For a process with no end line: the agent's record of its end, when the agent saw it end. */
function finishedIfObserved(ref: AttemptRef | undefined): number | undefined {
  if (!ref || (ref.attempt.state !== 'failed' && ref.attempt.state !== 'succeeded')) return undefined;
  return ref.attempt.finishedAt ?? undefined;
}

export function devices(cuda: string): number[] {
  return cuda
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map(Number);
}

interface Interval {
  key: string;
  machine: string;
  gpus: number[];
  from: number;
  to: number;
}

const shared = (a: number[], b: number[]) => a.filter((x) => b.includes(x)).join(',');

function overlaps(xs: Interval[]): [Interval, Interval][] {
  const res: [Interval, Interval][] = [];
  const gpuOnes = xs.filter((x) => x.gpus.length > 0);
  for (let i = 0; i < gpuOnes.length; i++) {
    for (let j = i + 1; j < gpuOnes.length; j++) {
      const a = gpuOnes[i]!;
      const b = gpuOnes[j]!;
      if (a.machine !== b.machine || shared(a.gpus, b.gpus) === '') continue;
      if (a.from < b.to && b.from < a.to) res.push([a, b]);
    }
  }
  return res;
}

/** Parses a JSON-lines history; a torn or foreign line is reported, not skipped silently. */
export function parseHistory(text: string): { lines: HistoryLine[]; bad: string[] } {
  const lines: HistoryLine[] = [];
  const bad: string[] = [];
  for (const raw of text.split('\n')) {
    if (!raw.trim()) continue;
    try {
      lines.push(JSON.parse(raw) as HistoryLine);
    } catch {
      bad.push(raw);
    }
  }
  return { lines, bad };
}

export function formatViolations(vs: Violation[]): string {
  return vs.map((x) => `[${x.invariant}] ${x.detail}`).join('\n');
}

import { ConflictError } from '../domain/errors.js';
import { ValidationError } from '../spec/validation-error.js';
import type { JobDefinition } from '../domain/job-definition.js';
import { isJobTerminal, type JobState } from '../domain/job-state.js';
import { rerunSpecIssues } from '../domain/rerun-spec-changes.js';
import { suggest } from '../spec/schema-issues.js';
import { isStageTerminal, type StageState } from '../domain/stage-state.js';

/** A committed output file as a manifest names it: its path, its blob's key, its size. */
export interface ManifestFile {
  path: string;
  blob: string;
  size: number;
}

/** Where a succeeded stage's committed outputs come from, and what running it cost. */
export interface StageProvenance {
  /** The job whose attempt ran it (the stage's own job, or, for a stage that was itself reused, that one's source). */
  fromJob: string;
  attemptId: string | null;
  /** The committed attempt's run time, and the GPUs it held. */
  runMs: number;
  gpus: number;
  files: ManifestFile[];
}

/** One stage of the job to rerun, as the planner needs it. */
export interface RerunSourceStage {
  name: string;
  needs: readonly string[];
  state: StageState;
  /** A succeeded stage whose outputs are held; null otherwise. */
  outputs: StageProvenance | null;
  /** When the size budget released its outputs; null when it did not. */
  outputsReleasedAt: number | null;
}

export interface RerunSource {
  jobId: string;
  state: JobState;
  definition: JobDefinition;
  stages: RerunSourceStage[];
}

export interface ReusedStage extends StageProvenance {
  stage: string;
}

export interface RerunPlan {
  jobId: string;
  /** The stages the rerun starts from: as asked, or every failed, skipped or canceled one. */
  from: string[];
  /** Stages that do not run: succeeded from the start with the original's outputs. */
  reused: ReusedStage[];
  /** Stages that run again, in the job's order; `because`: null when named in `from`, else the stage upstream that makes it run. */
  rerun: { stage: string; because: string | null }[];
  /** GPUs × run time of the reused stages' committed attempts, summed; and their run time. */
  gpuMsSaved: number;
  runMsSaved: number;
  /** The definition the new job gets (the original's, or the checked new spec's). */
  definition: JobDefinition;
}

/** Stages that start a rerun when none are named: the ones that did not succeed and ended. */
const RERUN_BY_DEFAULT: readonly StageState[] = ['failed', 'skipped', 'canceled'];

/**
 * Plans a rerun of a job (docs/rerun.md): which stages run again (the chosen ones and everything
 * downstream of them) and which are reused (all the others), refusing, with what to do instead,
 * whatever cannot be done. Pure: the store calls it inside the rerun's transaction with what it
 * read there. `cancelRunning`: a job that has not ended is planned as if its unfinished stages had
 * been canceled (the store cancels it first, in the same transaction).
 *
 * Refusals, in this order: an unknown stage in `from` (ValidationError); a job not ended without
 * `cancelRunning`, or nothing to rerun (ConflictError); a spec that changes the job's name, team or
 * shape (ValidationError); a reused stage that did not succeed or whose outputs are gone
 * (ConflictError); a spec that changes a reused stage (ValidationError).
 */
export function planRerun(src: RerunSource, opts: { from?: readonly string[]; cancelRunning?: boolean; next?: JobDefinition }): RerunPlan {
  const names = src.stages.map((s) => s.name);
  const byName = new Map(src.stages.map((s) => [s.name, s]));
  const unknown = (opts.from ?? []).flatMap((f, i) => {
    if (byName.has(f)) return [];
    const hint = suggest(f, names);
    return [
      { path: `/from/${i}`, message: `job ${src.jobId} has no stage "${f}"${hint ? ` (did you mean "${hint}"?)` : ''}; its stages: ${names.join(', ')}` },
    ];
  });
  if (unknown.length) throw new ValidationError(unknown);

  const ended = isJobTerminal(src.state);
  if (!ended && !opts.cancelRunning) {
    throw new ConflictError(
      `job ${src.jobId} is ${src.state}: a rerun starts from an ended job; wait for it to end, or cancel it and rerun in one step with --cancel-running (cancelRunning: true)`,
    );
  }
  // A job being canceled first: its unfinished stages end canceled.
  const stateOf = (s: RerunSourceStage): StageState => (isStageTerminal(s.state) ? s.state : 'canceled');

  const from = opts.from?.length ? [...new Set(opts.from)] : src.stages.filter((s) => RERUN_BY_DEFAULT.includes(stateOf(s))).map((s) => s.name);
  if (from.length === 0) {
    throw new ConflictError(
      `job ${src.jobId} succeeded: no stage failed, was skipped or was canceled, so there is nothing to rerun by default; name the stages to run again with --from STAGE`,
    );
  }

  // The rerun set: the chosen stages and, transitively, every stage that needs one of them.
  const because = new Map<string, string | null>(from.map((f) => [f, null]));
  for (let grew = true; grew;) {
    grew = false;
    for (const s of src.stages) {
      if (because.has(s.name)) continue;
      const up = s.needs.find((n) => because.has(n));
      if (up !== undefined) {
        because.set(s.name, up);
        grew = true;
      }
    }
  }
  const reusedNames = new Set(names.filter((n) => !because.has(n)));

  const next = opts.next ?? src.definition;
  const issues = rerunSpecIssues({ jobId: src.jobId, original: src.definition, next, reused: new Set() });
  if (issues.length) throw new ValidationError(issues);

  const reused: ReusedStage[] = [];
  const gone: string[] = [];
  for (const s of src.stages) {
    if (!reusedNames.has(s.name)) continue;
    const state = stateOf(s);
    if (state !== 'succeeded') {
      gone.push(`stage ${s.name} is ${state} in job ${src.jobId}, so it cannot be reused: add it to the stages to run again (--from ${s.name})`);
    } else if (!s.outputs) {
      const when =
        s.outputsReleasedAt !== null ? ` (released ${new Date(s.outputsReleasedAt).toISOString()}: the artifact store was over its size budget)` : '';
      gone.push(
        `stage ${s.name}'s committed outputs in job ${src.jobId} are gone${when}, so it cannot be reused: add it to the stages to run again (--from ${s.name})`,
      );
    } else {
      reused.push({ stage: s.name, ...s.outputs });
    }
  }
  if (gone.length) throw new ConflictError(gone.join('; '));

  const changes = rerunSpecIssues({ jobId: src.jobId, original: src.definition, next, reused: reusedNames });
  if (changes.length) throw new ValidationError(changes);

  return {
    jobId: src.jobId,
    from,
    reused,
    rerun: names.filter((n) => because.has(n)).map((n) => ({ stage: n, because: because.get(n)! })),
    gpuMsSaved: reused.reduce((t, r) => t + r.gpus * r.runMs, 0),
    runMsSaved: reused.reduce((t, r) => t + r.runMs, 0),
    definition: next,
  };
}

/** A stage of a rerun that runs: ready when every stage it needs is reused (succeeded already), else pending. */
export function rerunStageState(needs: readonly string[], reused: ReadonlySet<string>): StageState {
  return needs.every((n) => reused.has(n)) ? 'ready' : 'pending';
}

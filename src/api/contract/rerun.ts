import { Type, type Static } from 'typebox';
import { JobView } from './job-view.js';

/** `POST /v1/jobs/{id}/rerun` (docs/rerun.md). */
export const RerunRequest = Type.Object(
  {
    from: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 100 }), {
        maxItems: 1000,
        description: 'Stages to run again, with everything downstream of them; default: every stage that failed, was skipped or was canceled.',
      }),
    ),
    // A job spec (JobSpecSchema, served in the OpenAPI document with this route): the server checks it.
    spec: Type.Optional(
      Type.Unknown({
        description: "The job changed (a job spec): only the run settings of stages that run again, and the job's priority and labels, may differ.",
      }),
    ),
    cancelRunning: Type.Optional(Type.Boolean({ description: 'A job not ended is canceled first, in the same transaction (else refused, 409).' })),
    dryRun: Type.Optional(Type.Boolean({ description: 'Answer the plan only; nothing is written.' })),
  },
  { additionalProperties: false },
);
export type RerunRequest = { from?: string[]; spec?: unknown; cancelRunning?: boolean; dryRun?: boolean };

export const RerunPlanView = Type.Object({
  /** The job rerun. */
  jobId: Type.String(),
  from: Type.Array(Type.String()),
  /** Stages that do not run: succeeded from the start with the original's committed outputs. */
  reused: Type.Array(
    Type.Object({
      stage: Type.String(),
      fromJob: Type.String({ description: 'the job whose attempt ran it' }),
      attemptId: Type.Union([Type.String(), Type.Null()]),
      runSeconds: Type.Number(),
      gpus: Type.Number({ description: 'GPUs its attempt held; a share counts its part (0.25)' }),
      gpuHours: Type.Number(),
      files: Type.Integer(),
      bytes: Type.Integer(),
    }),
  ),
  /** Stages that run again, in the job's order; `because`: null when chosen, else the upstream stage that makes it run. */
  rerun: Type.Array(Type.Object({ stage: Type.String(), because: Type.Union([Type.String(), Type.Null()]) })),
  /** GPUs × run time of the reused stages' committed attempts, summed; and their run time. */
  gpuHoursSaved: Type.Number(),
  runSecondsSaved: Type.Number(),
  /** The original was canceled first (cancelRunning). */
  canceled: Type.Boolean(),
});
export type RerunPlanView = Static<typeof RerunPlanView>;

export const RerunResult = Type.Object({
  dryRun: Type.Boolean(),
  plan: RerunPlanView,
  /** The new job; null for a dry run. */
  job: Type.Union([JobView, Type.Null()]),
});
export type RerunResult = Static<typeof RerunResult>;

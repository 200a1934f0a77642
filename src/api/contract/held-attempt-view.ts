import { Type, type Static } from 'typebox';
import { GpuShareView } from './job-view.js';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);

/**
 * An attempt holding resources on a machine now: what runs where. To a team token, another team's
 * attempt shows its resources only (`jobId`, `jobName`, `team` and `stage` null): a machine's load
 * is no secret, another team's jobs are.
 */
export const HeldAttemptView = Type.Object({
  attemptId: Type.String(),
  machineId: Type.String(),
  machine: Type.String(),
  jobId: Nullable(Type.String()),
  jobName: Nullable(Type.String()),
  team: Nullable(Type.String()),
  stage: Nullable(Type.String()),
  number: Type.Integer(),
  state: Type.String({ description: 'scheduled or running; or an ended state while its process is still being stopped' }),
  cpuMillis: Type.Integer(),
  memoryBytes: Type.Integer(),
  gpus: Type.Array(Type.Integer()),
  gpuType: Nullable(Type.String()),
  /** A share of its one GPU (issue 29): thousandths and GPU memory held. Absent: whole GPUs. */
  gpuShare: Type.Optional(GpuShareView),
  scheduledAt: Type.Number(),
  startedAt: Nullable(Type.Number()),
  progress: Nullable(Type.Object({ fraction: Type.Number(), message: Nullable(Type.String()), at: Type.Number() })),
});
export type HeldAttemptView = Static<typeof HeldAttemptView>;

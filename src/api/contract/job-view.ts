import { Type, type Static } from 'typebox';
import { AttemptEndKindWire } from './attempt-end.js';
import { ContainmentReport } from './containment.js';
import { MACHINE_LIFECYCLES, StageAutoscaleView } from './autoscale-view.js';
import { ERROR_CODES } from './error-codes.js';
import type { EventType } from './event-types.js';
import { ATTEMPT_STATES, JOB_STATES, LOG_STREAMS, MACHINE_HEALTHS, MACHINE_SCHEDULINGS, STAGE_STATES, type StageState } from './states.js';
import { wireEnum } from './wire-enum.js';

/** The user-facing shapes of jobs, stages, attempts and machines: what the CLI, SDK and dashboard read. */
const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);
const StringMap = Type.Unsafe<Record<string, string>>(Type.Object({}, { additionalProperties: Type.String() }));

/** A share of one GPU: thousandths of it, and the bytes of its memory held (null: none bounded). */
export const GpuShareView = Type.Object({ milli: Type.Integer({ minimum: 1, maximum: 999 }), memoryBytes: Nullable(Type.Integer({ minimum: 1 })) });
export type GpuShareView = Static<typeof GpuShareView>;

export const AttemptView = Type.Object({
  id: Type.String(),
  number: Type.Integer(),
  state: wireEnum(ATTEMPT_STATES),
  machine: Type.String({ description: 'machine name' }),
  machineId: Type.String(),
  gpus: Type.Array(Type.Integer(), { description: 'device indices (CUDA_VISIBLE_DEVICES)' }),
  gpuType: Nullable(Type.String()),
  /** A share of its one GPU (issue 29): thousandths of it (250 = 0.25 GPU) and the GPU memory it holds. Absent: whole GPUs (and from older servers). */
  gpuShare: Type.Optional(GpuShareView),
  exitCode: Nullable(Type.Integer()),
  signal: Nullable(Type.String()),
  /** The detail of how it ended, for people (the kind is `endKind`). */
  reason: Nullable(Type.String()),
  /** How it ended (attempt-end.ts); null while active, and for attempts that ended before servers recorded it. Absent from older servers. */
  endKind: Type.Optional(Nullable(AttemptEndKindWire)),
  pid: Nullable(Type.Integer()),
  outputs: Nullable(Type.Array(Type.Object({ path: Type.String(), size: Type.Integer() }))),
  scheduledAt: Type.Number(),
  startedAt: Nullable(Type.Number()),
  finishedAt: Nullable(Type.Number()),
  /** When its process was known gone (its machine stopped reporting it): from then on its log is complete. */
  releasedAt: Type.Optional(Nullable(Type.Number())),
  /** What the stage last wrote to GANTRY_PROGRESS_FILE: 0..1, a message, when (ms). */
  progress: Type.Optional(Nullable(Type.Object({ fraction: Type.Number(), message: Nullable(Type.String()), at: Type.Number() }))),
  /** What it used, measured from its cgroup when it ended (docs/containment.md): its memory's peak in bytes and its CPU seconds. Null when unknown (running, no cgroup, an older agent); absent from older servers. */
  memoryPeakBytes: Type.Optional(Nullable(Type.Integer({ minimum: 0 }))),
  cpuSeconds: Type.Optional(Nullable(Type.Number({ minimum: 0 }))),
  /**
   * Its log passed the head's cap (docs/agent.md, "Logs"): the bytes dropped between the head and the
   * tail kept, where a line in the log marks them (0: the head is full, nothing dropped yet, or the
   * rest fitted in the tail). Null: the whole log is kept. Absent from older servers.
   */
  logCutBytes: Type.Optional(Nullable(Type.Integer({ minimum: 0 }))),
  /** A gang's member (issue 31, docs/gangs.md): its rank (0 is the rendezvous master) and the gang's size; its members share `number`. Absent on any other attempt (and from older servers). */
  gangRank: Type.Optional(Type.Integer({ minimum: 0 })),
  gangSize: Type.Optional(Type.Integer({ minimum: 2 })),
});
export type AttemptView = Static<typeof AttemptView>;

/** One member of a gang stage's latest attempt, by rank: where it runs and how it stands. */
export const GangMemberView = Type.Object({
  rank: Type.Integer({ minimum: 0 }),
  attemptId: Type.String(),
  state: wireEnum(ATTEMPT_STATES),
  machine: Type.String({ description: 'machine name' }),
  machineId: Type.String(),
  gpus: Type.Array(Type.Integer(), { description: 'device indices (CUDA_VISIBLE_DEVICES)' }),
  gpuType: Nullable(Type.String()),
});
export type GangMemberView = Static<typeof GangMemberView>;

export const StageView = Type.Object({
  name: Type.String(),
  state: wireEnum(STAGE_STATES),
  pool: Type.String(),
  needs: Type.Array(Type.String()),
  pendingReason: Nullable(Type.String({ description: 'why a ready stage is not placed yet' })),
  endReason: Nullable(Type.String({ description: 'why it ended as it did, when not a plain success' })),
  resources: Type.Object({
    cpuMillis: Type.Integer(),
    memoryBytes: Type.Integer(),
    gpu: Nullable(
      Type.Object({
        count: Type.Integer({ description: 'GPUs; 1 for a share of one' }),
        types: Type.Array(Type.String()),
        milli: Type.Optional(
          Type.Integer({ minimum: 1, maximum: 1000, description: 'thousandths of its GPU for a share (250 = gpu.count 0.25); absent: whole GPUs' }),
        ),
        memoryBytes: Type.Optional(Type.Integer({ minimum: 1, description: 'GPU memory it asks for (gpu.memory)' })),
      }),
    ),
    /** A gang (issue 31): the machines it runs on at once, each member taking the cpu, memory and gpu above. Absent: one machine. */
    machines: Type.Optional(Type.Integer({ minimum: 2 })),
  }),
  attemptsUsed: Type.Integer(),
  maxAttempts: Type.Integer(),
  lostUsed: Type.Integer(),
  outputAttemptId: Nullable(Type.String()),
  readySince: Nullable(Type.Number()),
  notBefore: Nullable(Type.Number()),
  finishedAt: Nullable(Type.Number()),
  attempts: Type.Array(AttemptView),
  /** A gang stage that has run: the members of its latest attempt, rank 0 first (each is also in `attempts`). Absent: not a gang, or not run yet. */
  members: Type.Optional(Type.Array(GangMemberView)),
  /** A stage a rerun reused (docs/rerun.md): it did not run in this job; its outputs are those of the job and attempt named. */
  reused: Type.Optional(
    Nullable(
      Type.Object({
        jobId: Type.String({ description: 'the job whose attempt ran it' }),
        attemptId: Nullable(Type.String()),
        runSeconds: Type.Number({ description: "that attempt's run time" }),
        gpus: Type.Number({ description: 'GPUs that attempt held; a share counts its part (0.25)' }),
      }),
    ),
  ),
  /** Its committed outputs (a succeeded stage's manifest): null before it succeeds, or once released. */
  outputs: Type.Optional(
    Nullable(
      Type.Array(
        Type.Object({
          path: Type.String(),
          size: Type.Integer(),
          sha256: Nullable(Type.String({ description: 'null for a file stored before content addressing' })),
        }),
      ),
    ),
  ),
  /** When the artifact store's size budget released its outputs (they are gone; the stage cannot be reused). */
  outputsReleasedAt: Type.Optional(Nullable(Type.Number())),
});
export type StageView = Static<typeof StageView>;

const jobFields = {
  id: Type.String(),
  name: Type.String(),
  team: Type.String(),
  priority: Type.Integer(),
  labels: StringMap,
  state: wireEnum(JOB_STATES),
  /** A failed job: the stage that failed first (whose failure failed the job) and its end reason. */
  failureReason: Nullable(Type.String()),
  createdAt: Type.Number(),
  updatedAt: Type.Number(),
  finishedAt: Nullable(Type.Number()),
};

export const JobSummaryView = Type.Object({
  ...jobFields,
  /** The job this one reruns (docs/rerun.md). */
  rerunOf: Type.Optional(Nullable(Type.String())),
  /** How many of its stages are in each state (states with none are left out). */
  stageCounts: Type.Unsafe<Partial<Record<StageState, number>>>(Type.Object({}, { additionalProperties: Type.Integer() })),
});
export type JobSummaryView = Static<typeof JobSummaryView>;

/** A stage no registered machine could ever run (a GPU type nobody has, more GPUs than any machine): said when it is submitted. */
export const SubmitWarning = Type.Object({
  stage: Type.String(),
  message: Type.String({ description: 'why: "no registered machine could ever run it: 2 lack 8 h100 GPUs"' }),
});
export type SubmitWarning = Static<typeof SubmitWarning>;

export const JobView = Type.Object({
  ...jobFields,
  cancelRequestedAt: Nullable(Type.Number()),
  /** The job this one reruns and the stages it started from; the jobs that rerun this one (docs/rerun.md). */
  rerunOf: Type.Optional(Nullable(Type.String())),
  rerunFrom: Type.Optional(Nullable(Type.Array(Type.String()))),
  reruns: Type.Optional(Type.Array(Type.String())),
  stages: Type.Array(StageView),
  /** Only in a submit's answer: stages no registered machine could ever run (accepted anyway; `?strict=true` refuses instead). */
  warnings: Type.Optional(Type.Array(SubmitWarning)),
});
export type JobView = Static<typeof JobView>;

export const MachineView = Type.Object({
  id: Type.String(),
  name: Type.String(),
  health: wireEnum(MACHINE_HEALTHS, { description: 'ready | suspect | lost: whether it is alive, as its heartbeats tell' }),
  scheduling: wireEnum(MACHINE_SCHEDULINGS, {
    description:
      'eligible | cordoned | draining | drained: what an operator wants of it (only eligible machines take new work; drained: draining, and no attempt holds resources there any more)',
  }),
  cpuMillis: Type.Integer(),
  memoryBytes: Type.Integer(),
  gpus: Type.Array(
    Type.Object({
      index: Type.Integer(),
      type: Type.String(),
      name: Type.String(),
      uuid: Nullable(Type.String()),
      busy: Type.Boolean({ description: 'an attempt holds it, whole or a share of it' }),
      /** Thousandths of it attempts hold: 1000 whole (or shared to the full), less for shares (issue 29). Absent from older servers. */
      usedMilli: Type.Optional(Type.Integer({ minimum: 0, maximum: 1000 })),
      /** Its memory, bytes, where its agent reports it. */
      memoryBytes: Type.Optional(Nullable(Type.Integer())),
    }),
  ),
  gpusDeclared: Type.Boolean({ description: 'GPUs were declared by flag or cluster file, not found by nvidia-smi' }),
  region: Nullable(Type.String()),
  labels: StringMap,
  allocated: Type.Object({
    cpuMillis: Type.Integer(),
    memoryBytes: Type.Integer(),
    gpuIndices: Type.Array(Type.Integer(), { description: 'each GPU an attempt holds, whole or a share of it' }),
    attempts: Type.Integer(),
    /** GPUs as an amount: 2.5 for two whole GPUs and two quarters (issue 29). Absent from older servers. */
    gpus: Type.Optional(Type.Number()),
    /** Each GPU held: the thousandths held and the GPU memory its shares hold, bytes. Absent from older servers. */
    gpuHeld: Type.Optional(Type.Array(Type.Object({ index: Type.Integer(), milli: Type.Integer(), memoryBytes: Type.Integer() }))),
  }),
  lastHeartbeatAt: Type.Number(),
  /** Its heartbeat period, the one the server last gave it (grown with the fleet), and the silence that
   *  makes it suspect, then lost; its work runs elsewhere within `lostWithinMs` of its death at worst
   *  (docs/failure-detection.md, "A period that grows with the fleet"). Absent from older servers. */
  heartbeat: Type.Optional(
    Type.Object({
      periodMs: Type.Integer({ minimum: 1 }),
      suspectAfterMs: Type.Integer({ minimum: 0 }),
      lostAfterMs: Type.Integer({ minimum: 0 }),
      lostWithinMs: Type.Integer({ minimum: 0 }),
    }),
  ),
  registeredAt: Type.Number(),
  /** What its agent enforces on the attempts it runs, as it reported at registration (docs/containment.md). Null: its agent did not say (an agent before containment); absent from older servers. */
  containment: Type.Optional(Nullable(ContainmentReport)),
  /** Where other machines reach it, as its agent registered (`--advertise-addr`, else its host's name): a gang whose rank 0 runs there meets at it. Absent from older servers. */
  address: Type.Optional(Type.String()),
  /** The ports its agent keeps for gangs' master ports (`--gang-ports`). Absent from older servers. */
  gangPorts: Type.Optional(Type.Object({ first: Type.Integer(), last: Type.Integer() })),
  /** The autoscaled pool that started it (issue 30); absent for a machine the autoscaler did not start (and from older servers). */
  pool: Type.Optional(Type.String({ description: 'the autoscaled pool that started it (the cluster file’s pools:), not the queue (cpu, gpu:TYPE)' })),
  /** Where it is in the autoscaler's lifecycle; absent with `pool`. */
  lifecycle: Type.Optional(wireEnum(MACHINE_LIFECYCLES, { description: 'provisioning | joining | ready | draining | failed | released' })),
});
export type MachineView = Static<typeof MachineView>;

/** The answer to cordon, uncordon, drain and remove: `changed: false` when it already was as asked. */
export const MachineChange = Type.Object({
  changed: Type.Boolean(),
  machine: MachineView,
  /** drain?now=true: how many running attempts were stopped. */
  stopped: Type.Optional(Type.Integer()),
});
export type MachineChange = Static<typeof MachineChange>;

export const EventView = Type.Object({
  seq: Type.Integer(),
  at: Type.Number(),
  /** `noun:verb` (event-types.ts); the wire schema says string, so that a newer server's new kinds pass older clients. */
  type: Type.Unsafe<EventType>(Type.String()),
  jobId: Nullable(Type.String()),
  stageName: Nullable(Type.String()),
  attemptId: Nullable(Type.String()),
  machineId: Nullable(Type.String()),
  message: Type.String(),
  /**
   * What the message says, as fields a script can read: a state change's `from` and `to`, a
   * submission's `stages` and `priority`, a preemption's `graceMs`, a token's `tokenId` (docs/metrics.md, "Events").
   * `{}` when the event has none; its keys depend on `type`, and new ones may appear.
   */
  data: Type.Record(Type.String(), Type.Unknown()),
});
export type EventView = Static<typeof EventView>;

/** One piece of a stage's output as `?format=json` returns it; `id` is the cursor for `after`. */
export const LogChunkView = Type.Object({
  id: Type.Integer(),
  attemptNumber: Type.Integer(),
  /** A gang member's chunk: its rank (`rank=all` interleaves every member's). Absent: not a gang. */
  rank: Type.Optional(Type.Integer({ minimum: 0 })),
  stream: wireEnum(LOG_STREAMS),
  at: Type.Number(),
  data: Type.String(),
});
export type LogChunkView = Static<typeof LogChunkView>;

export const ErrorBody = Type.Object({
  error: wireEnum(ERROR_CODES, { description: 'machine-readable code (error-codes.ts)' }),
  message: Type.String(),
  issues: Type.Optional(Type.Array(Type.Object({ path: Type.String(), message: Type.String() }))),
});
export type ErrorBody = Static<typeof ErrorBody>;

/** `GET /v1/jobs/{id}/stages/{stage}/explain`: why a stage is where it is, in numbers. */
export const StageExplanation = Type.Object({
  jobId: Type.String(),
  stage: Type.String(),
  state: wireEnum(STAGE_STATES),
  pool: Type.String(),
  /** The binding reason in one line; null when a machine has room now (the next pass places it). */
  reason: Nullable(Type.String()),
  /** Its team at its quota: the quota line (it binds before any machine is looked at); null otherwise. */
  quota: Nullable(Type.String()),
  /** Upstream stages not yet succeeded (a pending stage waits for them). */
  waitsFor: Type.Array(Type.Object({ stage: Type.String(), state: wireEnum(STAGE_STATES) })),
  /** Ready stages: how many wait ahead of it in its queue, and in all. */
  queue: Nullable(Type.Object({ ahead: Type.Number(), waiting: Type.Number() })),
  /** Machines registered, then how many are left after each constraint, in the order the scheduler checks them. */
  registered: Type.Number(),
  funnel: Type.Array(Type.Object({ step: Type.String(), reason: Type.String(), machines: Type.Number() })),
  /** Single changes to the stage that would each let some machine run it now. */
  suggestions: Type.Array(Type.String()),
  /** A ready stage on a server that autoscales: a machine starting (or joined) for it, or the autoscaler's reason for starting none; null when it said nothing. Absent from older servers. */
  autoscale: Type.Optional(Nullable(StageAutoscaleView)),
  /** A gang stage (issue 31): its size and sameLabel key. The funnel counts machines for one member; `reason` is the gang's (what set of machines it lacks). Absent: one machine. */
  gang: Type.Optional(Type.Object({ size: Type.Integer({ minimum: 2 }), sameLabel: Nullable(Type.String()) })),
});
export type StageExplanation = Static<typeof StageExplanation>;

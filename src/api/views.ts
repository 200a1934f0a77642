import { shownScheduling } from '../domain/machine-scheduling.js';
import type { AttemptRecord, HeldAttempt, JobDetail, JobSummary, MachineRecord } from '../store/records.js';
import type { HeldAttemptView } from './contract/held-attempt-view.js';
import type { AttemptView, GangMemberView, GpuShareView, JobSummaryView, JobView, MachineView } from './contract/job-view.js';
import { GPU_MILLI_WHOLE } from '../domain/resources.js';
import { silenceAllowances } from '../domain/heartbeat-period.js';
import type { ApiSettings } from './api-context.js';
import type { RerunPlanView } from './contract/rerun.js';
import type { RerunPlan } from '../advancer/rerun-plan.js';
import { ArtifactStore } from '../artifacts/artifact-store.js';

/** An attempt's share of its one GPU, as views show it; nothing for whole GPUs. */
function gpuShareOf(a: AttemptRecord): { gpuShare?: GpuShareView } {
  if (a.gpuIndices.length !== 1 || a.gpuMilli >= GPU_MILLI_WHOLE) return {};
  return { gpuShare: { milli: a.gpuMilli, memoryBytes: a.gpuMemoryBytes } };
}

/** Store records to wire views: the one place that decides what a client sees. */
export function attemptView(a: AttemptRecord): AttemptView {
  return {
    id: a.id,
    number: a.number,
    state: a.state,
    machine: a.machineName,
    machineId: a.machineId,
    gpus: a.gpuIndices,
    gpuType: a.gpuType,
    ...gpuShareOf(a),
    exitCode: a.exitCode,
    signal: a.signal,
    reason: a.reason,
    endKind: a.endKind,
    pid: a.pid,
    outputs: a.outputs,
    scheduledAt: a.scheduledAt,
    startedAt: a.startedAt,
    finishedAt: a.finishedAt,
    releasedAt: a.releasedAt,
    progress: a.progress,
    memoryPeakBytes: a.memoryPeakBytes,
    cpuSeconds: a.cpuSeconds,
    logCutBytes: a.logCutBytes,
    ...(a.gang ? { gangRank: a.gang.rank, gangSize: a.gang.size } : {}),
  };
}

/**
 * A gang stage's members as the stage's view lists them: the latest attempt's, one per rank (its
 * members share the number). Nothing for a stage that is not a gang or has not run.
 */
export function gangMembersOf(attempts: readonly AttemptRecord[]): { members?: GangMemberView[] } {
  const gang = attempts.filter((a) => a.gang);
  if (gang.length === 0) return {};
  const latest = Math.max(...gang.map((a) => a.number));
  const members = gang
    .filter((a) => a.number === latest)
    .sort((a, b) => a.gang!.rank - b.gang!.rank)
    .map((a) => ({
      rank: a.gang!.rank,
      attemptId: a.id,
      state: a.state,
      machine: a.machineName,
      machineId: a.machineId,
      gpus: a.gpuIndices,
      gpuType: a.gpuType,
    }));
  return { members };
}

function jobFields(j: JobSummary | JobDetail) {
  return {
    id: j.id,
    name: j.name,
    team: j.team,
    priority: j.priority,
    labels: j.labels,
    state: j.state,
    failureReason: j.failureReason,
    createdAt: j.createdAt,
    updatedAt: j.updatedAt,
    finishedAt: j.finishedAt,
  };
}

export function jobView(j: JobDetail): JobView {
  return {
    ...jobFields(j),
    cancelRequestedAt: j.cancelRequestedAt,
    rerunOf: j.rerunOf,
    rerunFrom: j.rerunFrom,
    reruns: j.reruns,
    stages: j.stages.map((s) => ({
      name: s.name,
      state: s.state,
      pool: s.pool,
      needs: s.definition.needs,
      pendingReason: s.pendingReason,
      endReason: s.endReason,
      resources: s.definition.resources,
      attemptsUsed: s.attemptsUsed,
      maxAttempts: s.definition.retry.maxAttempts,
      lostUsed: s.lostUsed,
      outputAttemptId: s.outputAttemptId,
      readySince: s.readySince,
      notBefore: s.notBefore,
      finishedAt: s.finishedAt,
      attempts: s.attempts.map(attemptView),
      ...gangMembersOf(s.attempts),
      reused: s.reused ? { jobId: s.reused.fromJob, attemptId: s.reused.attemptId, runSeconds: s.reused.runMs / 1000, gpus: s.reused.gpus } : null,
      outputs: s.outputs?.map((o) => ({ path: o.path, size: o.size, sha256: ArtifactStore.digestOf(o.blob) })) ?? null,
      outputsReleasedAt: s.outputsReleasedAt,
    })),
  };
}

const HOUR_MS = 3_600_000;

/** A rerun's plan as the client reads it. */
export function rerunPlanView(plan: RerunPlan, canceled: boolean): RerunPlanView {
  return {
    jobId: plan.jobId,
    from: plan.from,
    reused: plan.reused.map((r) => ({
      stage: r.stage,
      fromJob: r.fromJob,
      attemptId: r.attemptId,
      runSeconds: r.runMs / 1000,
      gpus: r.gpus,
      gpuHours: (r.gpus * r.runMs) / HOUR_MS,
      files: r.files.length,
      bytes: r.files.reduce((t, f) => t + f.size, 0),
    })),
    rerun: plan.rerun,
    gpuHoursSaved: plan.gpuMsSaved / HOUR_MS,
    runSecondsSaved: plan.runMsSaved / 1000,
    canceled,
  };
}

/**
 * The plan a rerun job was made by, read back from it (a repeated request's answer): its reused
 * stages carry their marker, and the rest ran again.
 */
export function rerunPlanOfJob(j: JobDetail): RerunPlanView {
  const reusedStages = j.stages.filter((s) => s.reused);
  const reusedNames = new Set(reusedStages.map((s) => s.name));
  const plan: RerunPlan = {
    jobId: j.rerunOf ?? j.id,
    from: j.rerunFrom ?? [],
    reused: reusedStages.map((s) => ({ stage: s.name, ...s.reused!, files: (s.outputs ?? []).map((o) => ({ path: o.path, blob: o.blob, size: o.size })) })),
    rerun: j.stages
      .filter((s) => !reusedNames.has(s.name))
      .map((s) => ({ stage: s.name, because: (j.rerunFrom ?? []).includes(s.name) ? null : (s.definition.needs.find((n) => !reusedNames.has(n)) ?? null) })),
    gpuMsSaved: reusedStages.reduce((t, s) => t + s.reused!.gpus * s.reused!.runMs, 0),
    runMsSaved: reusedStages.reduce((t, s) => t + s.reused!.runMs, 0),
    definition: { name: j.name, team: j.team, priority: j.priority, labels: j.labels, stages: j.stages.map((s) => s.definition) },
  };
  return rerunPlanView(plan, false);
}

export function jobSummaryView(j: JobSummary): JobSummaryView {
  return {
    ...jobFields(j),
    rerunOf: j.rerunOf,
    stageCounts: j.stageCounts,
  };
}

/** The settings a machine's silence is judged by (ApiSettings' part). */
export type DetectionSettings = Pick<ApiSettings, 'heartbeatMs' | 'suspectAfterMs' | 'lostAfterMs' | 'leaseMs' | 'lostMachinesIntervalMs'>;

/**
 * A machine's heartbeat period and what it implies (docs/failure-detection.md, "A period that
 * grows with the fleet"): suspect and lost after this much silence, and its work elsewhere within
 * `lostWithinMs` of its death at worst (the lost-machines loop's slowest pass after that).
 */
export function machineHeartbeatView(periodMs: number | null, s: DetectionSettings): NonNullable<MachineView['heartbeat']> {
  const a = silenceAllowances(periodMs, s);
  return {
    periodMs: periodMs ?? s.heartbeatMs,
    suspectAfterMs: a.suspectAfterMs,
    lostAfterMs: a.lostAfterMs,
    lostWithinMs: a.lostAfterMs + Math.round(1.2 * s.lostMachinesIntervalMs),
  };
}

/** `autoscaled`: the pool and lifecycle of the autoscaler's row of this name, when it started the machine (machine-routes.ts reads the rows). */
export function machineView(
  m: MachineRecord,
  detection: DetectionSettings,
  autoscaled?: { pool: string; lifecycle: NonNullable<MachineView['lifecycle']> },
): MachineView {
  return {
    id: m.id,
    name: m.name,
    health: m.health,
    scheduling: shownScheduling(m.scheduling, m.allocated.attempts),
    cpuMillis: m.cpuMillis,
    memoryBytes: m.memoryBytes,
    gpus: m.gpus.map((g) => {
      const usedMilli = m.allocated.gpuHeld.find((h) => h.index === g.index)?.milli ?? 0;
      return {
        index: g.index,
        type: g.type,
        name: g.name,
        uuid: g.uuid,
        busy: usedMilli > 0,
        usedMilli: Math.min(usedMilli, GPU_MILLI_WHOLE),
        memoryBytes: g.memoryMiB === null ? null : g.memoryMiB * 2 ** 20,
      };
    }),
    gpusDeclared: m.gpusDeclared,
    region: m.region,
    labels: m.labels,
    allocated: { ...m.allocated, gpus: m.allocated.gpuHeld.reduce((sum, h) => sum + Math.min(h.milli, GPU_MILLI_WHOLE), 0) / GPU_MILLI_WHOLE },
    lastHeartbeatAt: m.lastHeartbeatAt,
    heartbeat: machineHeartbeatView(m.heartbeatMs, detection),
    registeredAt: m.registeredAt,
    containment: m.containment,
    address: m.address,
    gangPorts: m.gangPorts,
    ...(autoscaled ? { pool: autoscaled.pool, lifecycle: autoscaled.lifecycle } : {}),
  };
}

/** What runs where; `visible`: false for another team's attempt, shown to a team token by its resources only. */
export function heldAttemptView(a: HeldAttempt, visible: boolean): HeldAttemptView {
  return {
    attemptId: a.id,
    machineId: a.machineId,
    machine: a.machineName,
    jobId: visible ? a.jobId : null,
    jobName: visible ? a.jobName : null,
    team: visible ? a.team : null,
    stage: visible ? a.stageName : null,
    number: a.number,
    state: a.state,
    cpuMillis: a.cpuMillis,
    memoryBytes: a.memoryBytes,
    gpus: a.gpuIndices,
    gpuType: a.gpuType,
    ...gpuShareOf(a),
    scheduledAt: a.scheduledAt,
    startedAt: a.startedAt,
    progress: visible ? a.progress : null,
  };
}

import { shownScheduling } from '../domain/machine-scheduling.js';
import type { AttemptRecord, HeldAttempt, JobDetail, JobSummary, MachineRecord } from '../store/records.js';
import type { HeldAttemptView } from './contract/held-attempt-view.js';
import type { AttemptView, JobSummaryView, JobView, MachineView } from './contract/job-view.js';

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
    exitCode: a.exitCode,
    signal: a.signal,
    reason: a.reason,
    pid: a.pid,
    outputs: a.outputs,
    scheduledAt: a.scheduledAt,
    startedAt: a.startedAt,
    finishedAt: a.finishedAt,
    releasedAt: a.releasedAt,
    progress: a.progress,
  };
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
    })),
  };
}

export function jobSummaryView(j: JobSummary): JobSummaryView {
  return {
    ...jobFields(j),
    stageCounts: j.stageCounts as Record<string, number>,
  };
}

export function machineView(m: MachineRecord): MachineView {
  return {
    id: m.id,
    name: m.name,
    health: m.health,
    scheduling: shownScheduling(m.scheduling, m.allocated.attempts),
    cpuMillis: m.cpuMillis,
    memoryBytes: m.memoryBytes,
    gpus: m.gpus.map((g) => ({ index: g.index, type: g.type, name: g.name, uuid: g.uuid, busy: m.allocated.gpuIndices.includes(g.index) })),
    gpusDeclared: m.gpusDeclared,
    region: m.region,
    labels: m.labels,
    allocated: m.allocated,
    lastHeartbeatAt: m.lastHeartbeatAt,
    registeredAt: m.registeredAt,
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
    scheduledAt: a.scheduledAt,
    startedAt: a.startedAt,
    progress: visible ? a.progress : null,
  };
}

import type { Selectable } from 'kysely';
import { machineAddress, machineGangPorts } from './gang-rendezvous.js';
import type { AttemptRecord, EventRecord, JobRecord, MachineRecord, StageRecord } from '../records.js';
import type { AttemptsTable, EventsTable, JobsTable, MachinesTable, StagesTable } from '../schema.js';

// PostgreSQL hands back bigint columns as strings unless told otherwise; the adapter installs a
// type parser, and `num` keeps these mappers honest for any driver that does not.
const num = (v: unknown): number => (typeof v === 'number' ? v : Number(v));
const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : num(v));

export function toJob(r: JobsTable): JobRecord {
  return {
    id: r.id,
    name: r.name,
    team: r.team,
    priority: num(r.priority),
    labels: JSON.parse(r.labels),
    state: r.state,
    failureReason: r.failure_reason,
    cancelRequestedAt: numOrNull(r.cancel_requested_at),
    createdAt: num(r.created_at),
    updatedAt: num(r.updated_at),
    finishedAt: numOrNull(r.finished_at),
    rerunOf: r.rerun_of ?? null,
    rerunFrom: r.rerun_from ? JSON.parse(r.rerun_from) : null,
  };
}

export function toStage(r: StagesTable): StageRecord {
  return {
    id: r.id,
    jobId: r.job_id,
    name: r.name,
    position: num(r.position),
    pool: r.pool,
    state: r.state,
    priority: num(r.priority),
    definition: JSON.parse(r.definition),
    attemptsUsed: num(r.attempts_used),
    lostUsed: num(r.lost_used),
    token: num(r.token),
    currentAttemptId: r.current_attempt_id,
    outputAttemptId: r.output_attempt_id,
    readySince: numOrNull(r.ready_since),
    notBefore: numOrNull(r.not_before),
    pendingReason: r.pending_reason,
    endReason: r.end_reason,
    createdAt: num(r.created_at),
    updatedAt: num(r.updated_at),
    finishedAt: numOrNull(r.finished_at),
    reused: r.reused_from ? { fromJob: r.reused_from, attemptId: r.output_attempt_id, runMs: num(r.reused_run_ms ?? 0), gpus: reusedGpus(r) } : null,
    outputsReleasedAt: numOrNull(r.outputs_released_at),
  };
}

export function toAttempt(r: AttemptsTable, machineName: string): AttemptRecord {
  return {
    id: r.id,
    stageId: r.stage_id,
    jobId: r.job_id,
    stageName: r.stage_name,
    number: num(r.number),
    token: num(r.token),
    machineId: r.machine_id,
    machineName,
    gpuIndices: JSON.parse(r.gpu_indices),
    gpuType: r.gpu_type,
    // Rows read before 0024 through a narrow select have no gpu_milli: they held whole GPUs.
    gpuMilli: r.gpu_milli === undefined || r.gpu_milli === null ? 1000 : num(r.gpu_milli),
    gpuMemoryBytes: numOrNull(r.gpu_memory_bytes ?? null),
    cpuMillis: num(r.cpu_millis),
    memoryBytes: num(r.memory_bytes),
    state: r.state,
    exitCode: numOrNull(r.exit_code),
    signal: r.signal,
    reason: r.reason,
    endKind: r.end_kind ?? null,
    pid: numOrNull(r.pid),
    outputs: r.outputs === null ? null : JSON.parse(r.outputs),
    leaseExpiresAt: numOrNull(r.lease_expires_at),
    scheduledAt: num(r.scheduled_at),
    startedAt: numOrNull(r.started_at),
    finishedAt: numOrNull(r.finished_at),
    releasedAt: numOrNull(r.released_at),
    progress:
      r.progress === null || r.progress === undefined
        ? null
        : { fraction: Number(r.progress), message: r.progress_message ?? null, at: num(r.progress_at ?? 0) },
    memoryPeakBytes: numOrNull(r.memory_peak_bytes),
    cpuSeconds: numOrNull(r.cpu_seconds),
    logCutBytes: numOrNull(r.log_cut_bytes),
    // Rows read through a narrow select, or before 0026, have no gang columns: not a gang.
    ...(r.gang_id !== undefined && r.gang_id !== null ? { gang: { id: r.gang_id, rank: num(r.gang_rank ?? 0), size: num(r.gang_size ?? 0) } } : {}),
  };
}

export function toMachine(r: Omit<MachinesTable, 'revision'>, allocated: MachineRecord['allocated']): MachineRecord {
  return {
    id: r.id,
    name: r.name,
    cpuMillis: num(r.cpu_millis),
    memoryBytes: num(r.memory_bytes),
    gpus: JSON.parse(r.gpus),
    gpusDeclared: Boolean(num(r.gpus_declared)),
    region: r.region,
    labels: JSON.parse(r.labels),
    health: r.health,
    scheduling: r.scheduling,
    agent: JSON.parse(r.agent),
    address: machineAddress(r),
    gangPorts: machineGangPorts(r),
    containment: r.containment ? JSON.parse(r.containment) : null,
    lastHeartbeatAt: num(r.last_heartbeat_at),
    heartbeatMs: r.heartbeat_ms === null ? null : num(r.heartbeat_ms),
    registeredAt: num(r.registered_at),
    allocated,
  };
}

export function toEvent(r: Selectable<EventsTable>): EventRecord {
  return {
    seq: num(r.seq),
    at: num(r.at),
    type: r.type,
    jobId: r.job_id,
    stageName: r.stage_name,
    attemptId: r.attempt_id,
    machineId: r.machine_id,
    message: r.message,
    data: JSON.parse(r.data),
  };
}

/** A reused stage's GPUs as an amount: its thousandths where recorded (0024: a share counts its part), else its whole GPUs. */
export function reusedGpus(s: { reused_gpus: number | null; reused_gpu_milli?: number | null }): number {
  return s.reused_gpu_milli != null ? Number(s.reused_gpu_milli) / 1000 : Number(s.reused_gpus ?? 0);
}

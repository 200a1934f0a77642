import { createHash } from 'node:crypto';
import { DEFAULT_RETRY, type JobDefinition, type StageDefinition } from '../../domain/job-definition.js';
import type { PlannedPlacement } from '../../scheduler/snapshot.js';
import type { MachineRegistration, Store } from '../store.js';

/** Normalised definitions for store tests, without going through the spec parser. */
export function stage(name: string, over: Partial<StageDefinition> = {}): StageDefinition {
  return {
    name,
    needs: [],
    resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: null },
    placement: { region: null, labels: {} },
    command: ['true'],
    env: {},
    timeoutSeconds: null,
    retry: { ...DEFAULT_RETRY, backoff: { initialSeconds: 1, maxSeconds: 10 } },
    preemptible: false,
    ...over,
  };
}

export function job(stages: StageDefinition[], over: Partial<JobDefinition> = {}): JobDefinition {
  return { name: 'test-job', team: 'default', priority: 50, labels: {}, stages, ...over };
}

export function cpuMachine(name: string, over: Partial<MachineRegistration> = {}): MachineRegistration {
  return {
    name,
    cpuMillis: 8000,
    memoryBytes: 16 * 2 ** 30,
    gpus: [],
    gpusDeclared: false,
    region: null,
    labels: {},
    agent: { version: 'test' },
    ...over,
  };
}

export function gpuMachine(name: string, count: number, type = 'h100', over: Partial<MachineRegistration> = {}): MachineRegistration {
  return cpuMachine(name, {
    cpuMillis: 32000,
    memoryBytes: 128 * 2 ** 30,
    gpus: Array.from({ length: count }, (_, index) => ({ index, uuid: null, name: `declared ${type}`, type, memoryMiB: null })),
    gpusDeclared: true,
    ...over,
  });
}

/** A blob key as the artifact store makes them, for content `text` (store tests make no files). */
export function blobKey(text: string): string {
  return `sha256:${createHash('sha256').update(text).digest('hex')}`;
}

/** A planner's placement of a gang: rank r on machine r, GPUs 0 and 1 of each, `member` the CPU and memory of each. */
export function gangPlacement(stageId: string, machines: readonly string[], member: { cpuMillis: number; memoryBytes: number }): PlannedPlacement {
  return {
    stageId,
    machineId: machines[0]!,
    gpuIndices: [0, 1],
    ...member,
    members: machines.map((machineId, rank) => ({ rank, machineId, gpuIndices: [0, 1] })),
  };
}

/**
 * A one-stage job of `team` placed on `machineId` (1 CPU, 256 MiB, no GPU) and started: its id and
 * its attempt (id and fencing token). For suites that need an attempt running and nothing more.
 */
export async function startedOneStage(
  store: Store,
  p: { machineId: string; now: number; leaseMs: number; stage?: Partial<StageDefinition>; team?: string },
): Promise<{ jobId: string; a: { id: string; token: number } }> {
  const j = await store.jobSubmit({ definition: job([stage('a', p.stage)], p.team ? { team: p.team } : {}), source: null, now: p.now });
  const r = await store.planApply({
    plan: { placements: [{ stageId: j.stages[0]!.id, machineId: p.machineId, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
    now: p.now,
    leaseMs: p.leaseMs,
  });
  const a = r.applied[0]!;
  await store.attemptStart({ attemptId: a.id, token: a.token, pid: 7, now: p.now, leaseMs: p.leaseMs });
  return { jobId: j.id, a };
}

/** A machine, a job of independent stages, and each stage placed on the machine (its attempts, in the order named). */
export async function placeAll(store: Store, names: string[], now: number) {
  const m = await store.machineRegister({ ...cpuMachine('m1'), now });
  const j = await store.jobSubmit({ definition: job(names.map((n) => stage(n))), source: null, now });
  const cluster = await store.schedulerSnapshot({ now, limitPerShape: 10 });
  const plan = {
    placements: cluster.queue.map((q) => ({ stageId: q.stageId, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 })),
    pending: [],
  };
  const applied = (await store.planApply({ plan, now, leaseMs: 10_000 })).applied;
  return { m, j, placed: names.map((n) => applied.find((a) => a.stageName === n)!) };
}

/** An attempt as its agent names it in a report. */
interface ReportedAttempt {
  attemptId: string;
  token: number;
}

/** Its machine reports `attempt` started (no pid), as an agent does: lease 10 s, the jitter's middle. */
export function reportStarted(store: Store, p: { machineId: string; attempt: ReportedAttempt; now: number }) {
  const { attemptId, token } = p.attempt;
  return store.machineReport({
    machineId: p.machineId,
    started: [{ attemptId, token, pid: null }],
    completed: [],
    now: p.now,
    leaseMs: 10_000,
    jitter: () => 0.5,
  });
}

/** Its machine reports `attempt` exited 0 with no outputs, as an agent does: lease 10 s, the jitter's middle. */
export function reportSucceeded(store: Store, p: { machineId: string; attempt: ReportedAttempt; now: number }) {
  const { attemptId, token } = p.attempt;
  const end = { kind: 'exited' as const, detail: null };
  return store.machineReport({
    machineId: p.machineId,
    started: [],
    completed: [{ attemptId, token, exitCode: 0, signal: null, end, outputs: [] }],
    now: p.now,
    leaseMs: 10_000,
    jitter: () => 0.5,
  });
}

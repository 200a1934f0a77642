import { createHash } from 'node:crypto';
import { DEFAULT_RETRY, type JobDefinition, type StageDefinition } from '../../domain/job-definition.js';
import type { MachineRegistration } from '../store.js';

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

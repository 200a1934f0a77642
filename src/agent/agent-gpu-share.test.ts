import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AssignmentWire } from '../api/contract/agent-protocol.js';
import type { GpuSharingMode } from '../api/contract/containment.js';
import { Agent } from './agent.js';
import type { DetectedMachine } from './machine/machine-detect.js';
import { gpuSharingFromFlags } from './run-agent-cli.js';
import { FakeServer, TEST_JOIN_TOKEN, fakeAssignment } from '../../test/support/fake-agent-server.js';

// A machine as discovery offers one with a MIG GPU and a whole GPU (gpu-discovery.ts): the agent
// runs no GPU code here, it only hands each attempt the variables that name and bound its GPU.
const machine: DetectedMachine = {
  name: 'gpu-1',
  cpuMillis: 2000,
  memoryBytes: 2 ** 30,
  gpus: [
    {
      index: 100,
      uuid: 'MIG-a1f3e0b2-6c4d-5e8f-9a0b-1c2d3e4f5a6b',
      name: 'NVIDIA H100 80GB HBM3 MIG 3g.40gb',
      type: 'h100-3g.40gb',
      memoryMiB: 40960,
      deviceMinor: 0,
    },
    { index: 1, uuid: 'GPU-1a4c6e8b-0d2f-4a6c-9e8b-5d7f9b1c3e5a', name: 'NVIDIA H100 80GB HBM3', type: 'h100', memoryMiB: 81559, deviceMinor: 1 },
  ],
  gpusDeclared: false,
  region: null,
  labels: {},
};

let dir: string;
let srv: FakeServer;
let agent: Agent | null;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-share-'));
  srv = new FakeServer({ heartbeatMs: 500, leaseMs: 5000, killGraceMs: 300 });
  await srv.listen();
  agent = null;
});

afterEach(async () => {
  await agent?.stop();
  await srv.close();
  await rm(dir, { recursive: true, force: true });
});

async function startAgent(gpuSharing?: GpuSharingMode): Promise<void> {
  agent = new Agent({
    joinToken: TEST_JOIN_TOKEN,
    serverUrl: srv.url,
    dataDir: join(dir, 'data'),
    machine,
    log: () => {},
    retry: { tries: 2, baseMs: 20 },
    stopDeliverMs: 300,
    pidDelayMs: 0,
    ...(gpuSharing ? { gpuSharing } : {}),
  });
  await agent.start();
}

/** Runs one assignment whose command writes its GPU variables as an output, and returns them. */
async function gpuEnvOf(over: Partial<AssignmentWire>): Promise<Record<string, string>> {
  const a = fakeAssignment('att_share_', {
    command: ['sh', '-c', 'env | grep -E "^CUDA_(VISIBLE_DEVICES|MPS_)" > "$GANTRY_OUTPUT_DIR/gpu.env" || true'],
    ...over,
  });
  srv.push({ assignments: [a] });
  const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
  expect(done.body).toMatchObject({ exitCode: 0 });
  const text = srv.outputs.get(a.attemptId)?.get('gpu.env')?.toString() ?? '';
  return Object.fromEntries(
    text
      .split('\n')
      .filter(Boolean)
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

describe('an attempt given a share of a GPU', () => {
  it('under MPS sees its one GPU by UUID and the MPS bounds of its share; the registration says mps', async () => {
    await startAgent('mps');
    const register = await srv.waitFor((e) => e.type === 'register');
    expect(register.body.agent.containment.gpuSharing).toBe('mps');
    expect(register.body.gpus).toEqual(machine.gpus.map(({ deviceMinor: _minor, ...wire }) => wire));

    expect(await gpuEnvOf({ gpuIndices: [1], gpuShare: { milli: 250, memoryBytes: 10 * 2 ** 30 } })).toEqual({
      CUDA_VISIBLE_DEVICES: 'GPU-1a4c6e8b-0d2f-4a6c-9e8b-5d7f9b1c3e5a',
      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '25',
      CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '0=10240M',
    });
    // A MIG instance, whole: its MIG UUID, no bound.
    expect(await gpuEnvOf({ gpuIndices: [100] })).toEqual({ CUDA_VISIBLE_DEVICES: 'MIG-a1f3e0b2-6c4d-5e8f-9a0b-1c2d3e4f5a6b' });
  });

  it('time-sliced (the default) sees its GPU and nothing that bounds it; the registration says so', async () => {
    await startAgent();
    expect((await srv.waitFor((e) => e.type === 'register')).body.agent.containment.gpuSharing).toBe('time-slicing');
    expect(await gpuEnvOf({ gpuIndices: [1], gpuShare: { milli: 500 } })).toEqual({ CUDA_VISIBLE_DEVICES: 'GPU-1a4c6e8b-0d2f-4a6c-9e8b-5d7f9b1c3e5a' });
  });

  it('is not started when its share comes with two GPUs, saying why', async () => {
    await startAgent('mps');
    const a = fakeAssignment('att_share_', { gpuIndices: [1, 100], gpuShare: { milli: 500 } });
    srv.push({ assignments: [a] });
    const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
    expect(done.body.reason).toMatch(/must come with exactly one GPU, got 2/);
  });
});

describe('--gpu-sharing', () => {
  it('is the flag, else $GANTRY_GPU_SHARING, else time-slicing; anything else is refused, naming it', () => {
    expect(gpuSharingFromFlags({}, {})).toBe('time-slicing');
    expect(gpuSharingFromFlags({}, { GANTRY_GPU_SHARING: '' })).toBe('time-slicing');
    expect(gpuSharingFromFlags({}, { GANTRY_GPU_SHARING: 'MPS' })).toBe('mps');
    expect(gpuSharingFromFlags({ gpuSharing: 'time-slicing' }, { GANTRY_GPU_SHARING: 'mps' })).toBe('time-slicing');
    expect(() => gpuSharingFromFlags({ gpuSharing: 'hami' }, {})).toThrow('--gpu-sharing "hami" is not one of mps, time-slicing');
  });
});

import { describe, expect, it } from 'vitest';
import type { AssignmentWire } from '../../api/contract/agent-protocol.js';
import { attemptOwnEnv } from './attempt-env.js';

const assignment = (over: Partial<AssignmentWire> = {}): AssignmentWire => ({
  attemptId: 'att_1',
  token: 4,
  jobId: 'job_1',
  stageName: 'train',
  attemptNumber: 2,
  command: ['torchrun', 'train.py'],
  env: { MASTER_PORT: '1', WORLD_SIZE: '99', MINE: 'yes' },
  gpuIndices: [0, 1],
  timeoutSeconds: null,
  inputs: [],
  ...over,
});
const dirs = { output: '/o', input: '/i' };

describe('attemptOwnEnv', () => {
  it("gives a gang's member its rank and rank 0's address, under Gantry's names and torch's, over the stage's own", () => {
    const env = attemptOwnEnv(assignment({ gang: { rank: 2, size: 4, masterAddr: 'node-a', masterPort: 29731 } }), dirs, 'g3', null, {
      CUDA_VISIBLE_DEVICES: '0,1',
    });
    expect(env).toMatchObject({
      GANTRY_GANG_SIZE: '4',
      GANTRY_GANG_RANK: '2',
      GANTRY_GANG_MASTER_ADDR: 'node-a',
      GANTRY_GANG_MASTER_PORT: '29731',
      MASTER_ADDR: 'node-a',
      MASTER_PORT: '29731',
      WORLD_SIZE: '4',
      RANK: '2',
      NODE_RANK: '2',
      LOCAL_WORLD_SIZE: '1',
      CUDA_VISIBLE_DEVICES: '0,1',
      GANTRY_ATTEMPT: '2',
      MINE: 'yes',
    });
  });

  it('sets none of them for an attempt that is no gang (a stage may set its own)', () => {
    const env = attemptOwnEnv(assignment(), dirs, 'g3', null, {});
    expect(Object.keys(env).filter((k) => k.startsWith('GANTRY_GANG_') || ['RANK', 'NODE_RANK', 'MASTER_ADDR', 'LOCAL_WORLD_SIZE'].includes(k))).toEqual([]);
    expect([env.WORLD_SIZE, env.MASTER_PORT]).toEqual(['99', '1']);
  });
});

import { describe, expect, it } from 'vitest';
import type { CgroupEnforcement } from './cgroup-tree.js';
import { buildContainmentReport, migIsolationReport } from './build-containment-report.js';
import { cgroupJoinWaitHint } from './cgroup-join-wait.js';

const v1: CgroupEnforcement = {
  mechanism: 'cgroup-v1',
  memory: 'v1',
  cpu: 'v1',
  pids: 'v1',
  devices: true,
  kill: 'freezer',
  v2: false,
  v1: new Set(['memory', 'cpu', 'pids', 'devices', 'freezer']),
  problems: [],
};

describe('migIsolationReport', () => {
  it('says nothing on a machine without MIG devices', () => {
    expect(migIsolationReport(null, true, false)).toEqual({ isolated: null, problem: null });
  });

  it('isolated where every MIG device has its capability minors and the devices cgroup or the sandbox restricts the files', () => {
    expect(migIsolationReport({ isolated: true }, true, false)).toEqual({ isolated: true, problem: null });
    expect(migIsolationReport({ isolated: true }, false, true)).toEqual({ isolated: true, problem: null });
  });

  it('not isolated, saying why, where a device is unknown or nothing restricts the files', () => {
    expect(migIsolationReport({ isolated: false, why: 'nvidia-smi -q failed' }, true, true)).toEqual({
      isolated: false,
      problem: 'MIG devices of one GPU are not isolated from each other: nvidia-smi -q failed; an attempt on such a device may open every capability file',
    });
    expect(migIsolationReport({ isolated: true }, false, false)).toMatchObject({
      isolated: false,
      problem: expect.stringMatching(/neither the v1 devices cgroup nor the sandbox/),
    });
  });
});

describe('buildContainmentReport', () => {
  const who = { user: 'dynamic 200000-200999', sandbox: null };

  it('reports migIsolated, and the problem where not, only for a machine with MIG devices', () => {
    expect(buildContainmentReport(v1, who)).not.toHaveProperty('migIsolated');
    expect(buildContainmentReport(v1, { ...who, mig: { isolated: true, problem: null } })).toMatchObject({ migIsolated: true, problems: [] });
    const open = buildContainmentReport(v1, { ...who, mig: migIsolationReport({ isolated: false, why: 'x' }, true, false) });
    expect(open.migIsolated).toBe(false);
    expect(open.problems).toEqual([expect.stringMatching(/^MIG devices of one GPU are not isolated from each other: x;/)]);
  });

  it('reports favordynmods, and how to set it where not, only where attempts join cgroups', () => {
    expect(buildContainmentReport(v1, who)).not.toHaveProperty('favordynmods');
    expect(buildContainmentReport(v1, { ...who, joinWait: null })).not.toHaveProperty('favordynmods');
    expect(buildContainmentReport(v1, { ...who, joinWait: { kind: 'no-cgroups' } })).not.toHaveProperty('favordynmods');
    expect(buildContainmentReport(v1, { ...who, joinWait: { kind: 'favoured', mount: '/sys/fs/cgroup' } })).toMatchObject({ favordynmods: true, problems: [] });
    const waits = buildContainmentReport(v1, { ...who, joinWait: { kind: 'waits', v2Mount: null } });
    expect(waits.favordynmods).toBe(false);
    expect(waits.problems).toEqual([cgroupJoinWaitHint({ kind: 'waits', v2Mount: null })]);
  });
});

import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ValidationError } from '../spec/validation-error.js';
import { serverConfigFrom } from './server-command.js';
import { checkServerConfig, defaultServerConfig, outputPolicyFrom, reconcilerEnv, type ServerConfig } from './server-config.js';

describe("the reconciler's settings", () => {
  afterEach(() => {
    for (const name of Object.values(reconcilerEnv)) delete process.env[name];
  });

  it('default to the values the single pass had, and pass the check', () => {
    const c = defaultServerConfig();
    expect(c).toMatchObject({
      lostMachinesIntervalMs: 1000,
      lostAttemptsIntervalMs: 1000,
      queueTimeoutIntervalMs: 1000,
      queueTimeoutBatch: 100,
      repairIntervalMs: 1000,
      repairAfterMs: 30_000,
      repairBatch: 100,
      repairScan: 2000,
      retentionIntervalMs: 1000,
      retentionMs: 7 * 24 * 3_600_000,
      retentionBatch: 100,
      pruneIntervalMs: 1000,
      outboxKeepMs: 3_600_000,
      idempotencyKeepMs: 24 * 3_600_000,
      auditKeepMs: 90 * 24 * 3_600_000,
      straySweepIntervalMs: 24 * 3_600_000,
      uploadTempKeepMs: 24 * 3_600_000,
    });
    expect(() => checkServerConfig(c)).not.toThrow();
  });

  it.each<[Partial<ServerConfig>, RegExp]>([
    [{ lostMachinesIntervalMs: 0 }, /lostMachinesIntervalMs \(the lost-machines loop's period\) must be positive, not 0/],
    [{ repairIntervalMs: -5 }, /repairIntervalMs .* must be positive, not -5/],
    [{ pruneIntervalMs: Number.NaN }, /pruneIntervalMs .* must be positive/],
    [{ retentionMs: 0 }, /retentionMs .* must be positive/],
    [{ repairAfterMs: 0 }, /repairAfterMs .* must be positive/],
    [{ outboxKeepMs: -1 }, /outboxKeepMs .* must not be negative/],
    [{ repairBatch: 0 }, /repairBatch .* must be a whole number above 0, not 0/],
    [{ retentionBatch: 2.5 }, /retentionBatch .* must be a whole number above 0, not 2.5/],
    [{ queueTimeoutBatch: -1 }, /queueTimeoutBatch/],
    [{ repairScan: 0 }, /repairScan/],
    [{ uploadTempKeepMs: 0 }, /uploadTempKeepMs/],
  ])('refuses %o', (over, message) => {
    expect(() => checkServerConfig(defaultServerConfig(over))).toThrow(message);
  });

  it('accepts outboxKeepMs 0: published outbox rows go at the next pass', () => {
    expect(() => checkServerConfig(defaultServerConfig({ outboxKeepMs: 0 }))).not.toThrow();
  });

  it('are read from their environment variables by gantry server, and checked there', () => {
    process.env.GANTRY_REPAIR_AFTER_MS = '60000';
    process.env.GANTRY_RETENTION_BATCH = '500';
    process.env.GANTRY_PRUNE_INTERVAL_MS = '30000';
    const c = serverConfigFrom({ dataDir: '/tmp/x', port: '0', host: '127.0.0.1' });
    expect([c.repairAfterMs, c.retentionBatch, c.pruneIntervalMs, c.repairBatch]).toEqual([60_000, 500, 30_000, 100]);
    process.env.GANTRY_REPAIR_BATCH = '0';
    expect(() => serverConfigFrom({ dataDir: '/tmp/x', port: '0', host: '127.0.0.1' })).toThrow(/repairBatch/);
  });

  it('GANTRY_GPU_POLICY: FGD by default, another server policy by name, and a clear error naming the choices otherwise', () => {
    const flags = { dataDir: '/tmp/x', port: '0', host: '127.0.0.1' };
    try {
      expect(serverConfigFrom(flags).gpuPolicy).toBe('fgd');
      process.env.GANTRY_GPU_POLICY = 'best-fit';
      expect(serverConfigFrom(flags).gpuPolicy).toBe('best-fit');
      process.env.GANTRY_GPU_POLICY = 'packing';
      expect(serverConfigFrom(flags).gpuPolicy).toBe('packing');
      process.env.GANTRY_GPU_POLICY = 'bestfit';
      expect(() => serverConfigFrom(flags)).toThrow(
        'GANTRY_GPU_POLICY=bestfit: no such GPU placement policy; give one of fgd, fgd-paper, best-fit, packing, dotprod (default fgd)',
      );
      // The paper's peers that need state the server does not keep run in gantry sim only.
      for (const simOnly of ['random', 'clustering']) {
        process.env.GANTRY_GPU_POLICY = simOnly;
        expect(() => serverConfigFrom(flags)).toThrow(`GANTRY_GPU_POLICY=${simOnly}: ${simOnly} is one of the FGD paper's peers, for gantry sim only`);
      }
    } finally {
      delete process.env.GANTRY_GPU_POLICY;
    }
  });

  it('GANTRY_AUDIT_RETENTION_DAYS: how long audit rows are kept (default 90 days); GANTRY_STREAMS_PER_TOKEN: open streams a token may hold (default 32)', () => {
    const flags = { dataDir: '/tmp/x', port: '0', host: '127.0.0.1' };
    try {
      expect([serverConfigFrom(flags).auditKeepMs, serverConfigFrom(flags).streamsPerToken]).toEqual([90 * 86_400_000, 32]);
      process.env.GANTRY_AUDIT_RETENTION_DAYS = '7';
      process.env.GANTRY_STREAMS_PER_TOKEN = '4';
      expect([serverConfigFrom(flags).auditKeepMs, serverConfigFrom(flags).streamsPerToken]).toEqual([7 * 86_400_000, 4]);
      process.env.GANTRY_AUDIT_RETENTION_DAYS = '0';
      expect(() => serverConfigFrom(flags)).toThrow(/auditKeepMs \(how long audit rows are kept \(GANTRY_AUDIT_RETENTION_DAYS\)\) must be positive, not 0/);
      process.env.GANTRY_AUDIT_RETENTION_DAYS = '7';
      process.env.GANTRY_STREAMS_PER_TOKEN = '2.5';
      expect(() => serverConfigFrom(flags)).toThrow(/streams per token \(2.5\) must be a whole number/);
    } finally {
      delete process.env.GANTRY_AUDIT_RETENTION_DAYS;
      delete process.env.GANTRY_STREAMS_PER_TOKEN;
    }
  });

  it('GANTRY_TOKEN_RETENTION_DAYS: how long revoked and expired tokens are kept (default 30 days)', () => {
    const flags = { dataDir: '/tmp/x', port: '0', host: '127.0.0.1' };
    try {
      expect(serverConfigFrom(flags).tokenKeepMs).toBe(30 * 86_400_000);
      process.env.GANTRY_TOKEN_RETENTION_DAYS = '2';
      expect(serverConfigFrom(flags).tokenKeepMs).toBe(2 * 86_400_000);
      process.env.GANTRY_TOKEN_RETENTION_DAYS = '0';
      expect(() => serverConfigFrom(flags)).toThrow(
        /tokenKeepMs \(how long revoked and expired tokens are kept \(GANTRY_TOKEN_RETENTION_DAYS\)\) must be positive, not 0/,
      );
    } finally {
      delete process.env.GANTRY_TOKEN_RETENTION_DAYS;
    }
  });
});

describe('the heartbeat rate', () => {
  afterEach(() => {
    delete process.env.GANTRY_MAX_HEARTBEATS_PER_SECOND;
  });

  it('defaults by store: 2,500 a second on SQLite, 1,250 on PostgreSQL; GANTRY_MAX_HEARTBEATS_PER_SECOND wins on either', () => {
    const flags = { dataDir: '/tmp/x', port: '0', host: '127.0.0.1' };
    expect(serverConfigFrom(flags).maxHeartbeatsPerSecond).toBe(2500);
    expect(serverConfigFrom({ ...flags, database: 'postgres://db.example/gantry' }).maxHeartbeatsPerSecond).toBe(1250);
    process.env.GANTRY_MAX_HEARTBEATS_PER_SECOND = '5000';
    expect(serverConfigFrom({ ...flags, database: 'postgres://db.example/gantry' }).maxHeartbeatsPerSecond).toBe(5000);
    expect(serverConfigFrom(flags).maxHeartbeatsPerSecond).toBe(5000);
  });
});

describe("a log's caps", () => {
  afterEach(() => {
    delete process.env.GANTRY_LOG_HEAD_BYTES;
    delete process.env.GANTRY_LOG_TAIL_BYTES;
  });

  it('keep 56 MiB of head and 8 MiB of tail by default, and read sizes or bytes from the environment', () => {
    expect(serverConfigFrom({ dataDir: '/tmp/x', port: '0', host: '127.0.0.1' }).logCaps).toEqual({ headBytes: 56 * 2 ** 20, tailBytes: 8 * 2 ** 20 });
    process.env.GANTRY_LOG_HEAD_BYTES = '64Ki';
    process.env.GANTRY_LOG_TAIL_BYTES = '16384';
    expect(serverConfigFrom({ dataDir: '/tmp/x', port: '0', host: '127.0.0.1' }).logCaps).toEqual({ headBytes: 65536, tailBytes: 16384 });
  });

  it('refuse a size that is not one, or one under 1 KiB, naming the setting', () => {
    process.env.GANTRY_LOG_TAIL_BYTES = 'lots';
    expect(() => serverConfigFrom({ dataDir: '/tmp/x', port: '0', host: '127.0.0.1' })).toThrow(
      /^GANTRY_LOG_TAIL_BYTES=lots: .*give bytes, or a size such as 56Mi/,
    );
    process.env.GANTRY_LOG_TAIL_BYTES = '100';
    expect(() => serverConfigFrom({ dataDir: '/tmp/x', port: '0', host: '127.0.0.1' })).toThrow(
      /the log's tail \(GANTRY_LOG_TAIL_BYTES, 100 bytes\) must be at least 1 KiB/,
    );
  });
});

describe('the output limits (docs/security.md, "Output limits")', () => {
  it('default to 10 GiB and 10,000 files a stage, at most 1 TiB and 1,000,000, no bound per team; the environment sets each', () => {
    expect(outputPolicyFrom({})).toEqual({
      stageDefault: { bytes: 10 * 2 ** 30, files: 10_000 },
      stageMax: { bytes: 2 ** 40, files: 1_000_000 },
      teamMaxBytes: null,
    });
    expect(
      outputPolicyFrom({
        GANTRY_OUTPUTS_DEFAULT_BYTES: '256Mi',
        GANTRY_OUTPUTS_DEFAULT_FILES: '100',
        GANTRY_OUTPUTS_MAX_BYTES: '20000000000',
        GANTRY_OUTPUTS_MAX_FILES: '5000',
        GANTRY_TEAM_OUTPUTS_MAX_BYTES: '2Ti',
      }),
    ).toEqual({ stageDefault: { bytes: 256 * 2 ** 20, files: 100 }, stageMax: { bytes: 20e9, files: 5000 }, teamMaxBytes: 2 * 2 ** 40 });
    expect(outputPolicyFrom({ GANTRY_TEAM_OUTPUTS_MAX_BYTES: '0' }).teamMaxBytes).toBeNull();
  });

  it('refuses a value that is no size or count, and a default above the most', () => {
    expect(() => outputPolicyFrom({ GANTRY_OUTPUTS_DEFAULT_BYTES: 'lots' })).toThrow(
      /^GANTRY_OUTPUTS_DEFAULT_BYTES=lots: .*give bytes, or a size such as 20Gi/,
    );
    expect(() => outputPolicyFrom({ GANTRY_OUTPUTS_MAX_BYTES: '0' })).toThrow(/^GANTRY_OUTPUTS_MAX_BYTES=0: must be a positive number of bytes/);
    expect(() => outputPolicyFrom({ GANTRY_OUTPUTS_MAX_FILES: '1.5' })).toThrow('GANTRY_OUTPUTS_MAX_FILES=1.5: give a whole number of files, at least 1');
    const c = defaultServerConfig({ outputs: outputPolicyFrom({ GANTRY_OUTPUTS_DEFAULT_BYTES: '2Ti' }) });
    expect(() => checkServerConfig(c)).toThrow(/the default output bytes of a stage \(GANTRY_OUTPUTS_DEFAULT_BYTES, 2199023255552\) must not exceed the most/);
  });
});

describe('autoscaling settings: gantry server --pools, GANTRY_POOLS, GANTRY_AUTOSCALE_INTERVAL_MS', () => {
  const flags = { dataDir: '/tmp/x', port: '0', host: '127.0.0.1' };
  afterEach(() => {
    delete process.env.GANTRY_POOLS;
    delete process.env.GANTRY_AUTOSCALE_INTERVAL_MS;
  });
  const file = (name: string, text: string) => {
    const dir = mkdtempSync(join(tmpdir(), 'gantry-pools-'));
    writeFileSync(join(dir, name), text);
    return join(dir, name);
  };

  it('reads the pools of a cluster file from --pools or GANTRY_POOLS, and the interval', () => {
    expect(serverConfigFrom(flags)).toMatchObject({ pools: [], autoscaleIntervalMs: 10_000 });
    const pools = join(import.meta.dirname, '../../examples/autoscale-cluster.yaml');
    expect(serverConfigFrom({ ...flags, pools }).pools.map((p) => p.name)).toEqual(['h100']);
    process.env.GANTRY_POOLS = pools;
    process.env.GANTRY_AUTOSCALE_INTERVAL_MS = '2000';
    expect(serverConfigFrom(flags)).toMatchObject({ pools: [{ name: 'h100' }], autoscaleIntervalMs: 2000 });
  });

  it('refuses a file with no pools, a pool that is wrong (naming where), and an interval under 100 ms', () => {
    const machinesOnly = file('machines.yaml', 'machines:\n  - { name: a, cpu: 2 }\n');
    expect(() => serverConfigFrom({ ...flags, pools: machinesOnly })).toThrow(ValidationError);
    expect(() => serverConfigFrom({ ...flags, pools: machinesOnly })).toThrow(/no pools: section/);
    const bad = file(
      'bad.yaml',
      'pools:\n  - { name: g, template: { cpu: 2, memory: 1Gi }, autoscale: { provider: command, min: 0, max: 1, idleSeconds: 1, bootTimeoutSeconds: 1 } }\n',
    );
    try {
      serverConfigFrom({ ...flags, pools: bad });
      expect.unreachable();
    } catch (err) {
      expect((err as ValidationError).issues.map((i) => i.path)).toEqual([`${bad}#/pools/0/autoscale/command`]);
    }
    process.env.GANTRY_AUTOSCALE_INTERVAL_MS = '50';
    expect(() => serverConfigFrom(flags)).toThrow(/GANTRY_AUTOSCALE_INTERVAL_MS, 50 ms\) must be at least 100 ms/);
  });
});

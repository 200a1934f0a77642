import { afterEach, describe, expect, it } from 'vitest';
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

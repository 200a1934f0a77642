import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePools } from '../autoscale/pool-template.js';
import type { MachineProvider, StartRequest } from '../autoscale/provider.js';
import { job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import { createControlPlane } from './control-plane.js';
import { checkServerConfig, databaseFile, defaultServerConfig } from './server-config.js';

/**
 * The control plane's wiring of the autoscaler (docs/autoscaling.md, "The loop").
 *
 * The server stops while a command provider's script hangs (a cloud call that never answers): the
 * autoscaler's pass waits on it, and the shutdown waited for it too, up to the script's timeout
 * (300 s), past any service manager's patience. Closing the providers ends the script, and the
 * start it was asked for fails nothing: the next process asks for the same names.
 */
describe('control plane stop with a command provider in flight', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-cp-stop-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('ends the hung script at once and leaves the start to be asked again', async () => {
    const mark = join(dir, 'asked');
    const script = join(dir, 'hang.sh');
    writeFileSync(script, `#!/usr/bin/env bash\ncat > /dev/null\ntouch '${mark}'\nsleep 60 & wait\n`);
    chmodSync(script, 0o755);
    const pools = parsePools([
      {
        name: 'g',
        template: { cpu: 8, memory: '32Gi', gpus: { type: 'h100', count: 1 } },
        autoscale: { provider: 'command', command: script, min: 0, max: 1, idleSeconds: 60, bootTimeoutSeconds: 600 },
      },
    ]);
    const config = defaultServerConfig({ dataDir: join(dir, 'data'), port: 0, rateLimitPerSecond: 0, pools, autoscaleIntervalMs: 100 });
    const cp = await createControlPlane(config, { logger: false });
    await cp.start();
    await cp.store.jobSubmit({
      definition: job([stage('a', { resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 1, types: ['h100'] } } })]),
      source: null,
      now: Date.now(),
    });
    const deadline = Date.now() + 15_000;
    while (!existsSync(mark) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(existsSync(mark)).toBe(true);

    const t0 = Date.now();
    await cp.stop();
    expect(Date.now() - t0).toBeLessThan(5000);
    const store = await openSqliteStore(databaseFile(config));
    try {
      expect((await store.autoscaleRows({})).map((r) => [r.name, r.lifecycle, r.requestedAt, r.failReason])).toEqual([['g-1', 'provisioning', null, null]]);
    } finally {
      await store.close();
    }
  }, 30_000);
});

/**
 * The machines a provider starts elsewhere join at the address the operator gives
 * (GANTRY_AUTOSCALE_SERVER_URL): the address the server listens on is 127.0.0.1 whenever it binds
 * to loopback or to every interface (0.0.0.0), which a cloud machine cannot reach.
 */
describe('the address autoscaled machines join at', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-cp-join-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is the configured one, not the listening address', async () => {
    const asked: StartRequest[] = [];
    const recording: MachineProvider = {
      start: async (req) => (asked.push(req), []),
      stop: async (req) => req.machines.map((m) => m.name),
      close: async () => {},
    };
    const pools = parsePools([
      {
        name: 'g',
        template: { cpu: 8, memory: '32Gi', gpus: { type: 'h100', count: 1 } },
        autoscale: { provider: 'command', command: '/bin/true', min: 0, max: 1, idleSeconds: 60, bootTimeoutSeconds: 600 },
      },
    ]);
    const config = defaultServerConfig({
      dataDir: join(dir, 'data'),
      port: 0,
      rateLimitPerSecond: 0,
      pools,
      autoscaleIntervalMs: 100,
      autoscaleServerUrl: 'https://gantry.example:7070',
    });
    const cp = await createControlPlane(config, { logger: false, providers: new Map([['g', recording]]) });
    await cp.start();
    try {
      await cp.store.jobSubmit({
        definition: job([stage('a', { resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 1, types: ['h100'] } } })]),
        source: null,
        now: Date.now(),
      });
      const deadline = Date.now() + 15_000;
      while (asked.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(asked.map((r) => [r.names, r.server])).toEqual([[['g-1'], 'https://gantry.example:7070']]);
    } finally {
      await cp.stop();
    }
  }, 30_000);

  it('refuses one that is not an http(s) URL, by its name', () => {
    expect(() => checkServerConfig(defaultServerConfig({ autoscaleServerUrl: 'gantry.example:7070' }))).toThrow(
      '(GANTRY_AUTOSCALE_SERVER_URL, gantry.example:7070) must be an http:// or https:// URL',
    );
  });
});

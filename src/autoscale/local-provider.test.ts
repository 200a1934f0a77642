import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO, until } from '../../test/support/gantry-process.js';
import { logLines } from '../../test/support/log-lines.js';
import { makeToken } from '../../test/support/tokens.js';
import { agentArgs } from '../server/cluster-file.js';
import { createControlPlane, type ControlPlane } from '../server/control-plane.js';
import { defaultServerConfig } from '../server/server-config.js';
import { LocalProvider } from './local-provider.js';
import { parsePools, type PoolTemplate } from './pool-template.js';

/**
 * The local provider against a real control plane (in this process, SQLite, a free port) and real
 * `gantry agent` children. The agents run from source under tsx: the server's own command line
 * (server/agent-command-line.ts) would run this process's entry, which under vitest is no CLI; the
 * flags are `gantry up`'s own (agentArgs).
 */
let dir: string;
let cp: ControlPlane;
let joinToken: string;
let pool: PoolTemplate;
let provider: LocalProvider;
const logs: string[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gantry-local-provider-'));
  cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, heartbeatMs: 300, rateLimitPerSecond: 0 }), { logger: logLines('warn').logger });
  joinToken = await makeToken(cp.store, 'join');
  await cp.start();
  pool = parsePools([
    {
      name: 'h100',
      template: { cpu: 2, memory: '3Gi', gpus: { type: 'H100', count: 2, memory: '80Gi' }, region: 'us-east', labels: { disk: 'ssd' } },
      autoscale: { provider: 'local', min: 0, max: 2, idleSeconds: 60, bootTimeoutSeconds: 60 },
    },
  ])[0]!;
  provider = new LocalProvider({
    agentCommandLine: (m, server, agentDir) => ({
      command: process.execPath,
      args: ['--import', 'tsx', join(REPO, 'src/cli/main.ts'), ...agentArgs(m, server, agentDir)],
    }),
    dataDir: dir,
    graceMs: 3000,
    agentOutput: 'ignore',
    log: (l) => logs.push(l),
  });
});

afterAll(async () => {
  await provider?.close();
  await cp?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const start = (names: string[]) => provider.start({ pool: 'h100', template: pool.template, names, server: cp.url, joinToken });
const pidOf = (providerId: string | undefined) => Number(/^local:(\d+)$/.exec(providerId ?? '')?.[1]);
const machine = async (name: string) => (await cp.store.machineList()).find((m) => m.name === name);

/** Running, not a zombie awaiting its reaper. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
}

describe('LocalProvider', () => {
  let firstPid = 0;

  it("starts a gantry agent that registers with the template's resources, in <dataDir>/agents/<name>", async () => {
    const [started] = await start(['h100-1']);
    expect(started!.name).toBe('h100-1');
    firstPid = pidOf(started!.providerId);
    expect(firstPid).toBeGreaterThan(0);
    const m = await until(
      'h100-1 to register',
      () => machine('h100-1'),
      (x) => x?.health === 'ready',
      20_000,
    );
    expect(m).toMatchObject({ cpuMillis: 2000, memoryBytes: 3 * 1024 ** 3, gpusDeclared: true, region: 'us-east', labels: { disk: 'ssd' } });
    expect(m!.gpus.map((g) => [g.type, g.memoryMiB])).toEqual([
      ['h100', 80 * 1024],
      ['h100', 80 * 1024],
    ]);
    expect(existsSync(join(dir, 'agents', 'h100-1'))).toBe(true);
    expect(logs.some((l) => l.includes('started agent h100-1') && l.includes('2 × h100 (80Gi), 2 CPU, 3Gi'))).toBe(true);
  }, 25_000);

  it('answers a start of a name it runs with that agent, and spawns no second', async () => {
    const [again] = await start(['h100-1']);
    expect(pidOf(again!.providerId)).toBe(firstPid);
    expect(logs.filter((l) => l.includes('started agent h100-1'))).toHaveLength(1);
  });

  it('starts an agent killed under it again, a second later, with the same name', async () => {
    process.kill(firstPid, 'SIGKILL');
    await until(
      'the restart',
      async () => logs.filter((l) => l.includes('started agent h100-1')).length,
      (n) => n === 2,
      10_000,
    );
    expect(logs.some((l) => l.includes('agent h100-1 exited (SIGKILL); restarting it in 1 s'))).toBe(true);
    const [now] = await start(['h100-1']);
    const pid = pidOf(now!.providerId);
    expect(pid).not.toBe(firstPid);
    expect(alive(pid)).toBe(true);
    expect(alive(firstPid)).toBe(false);
    firstPid = pid;
  }, 15_000);

  it('stop ends the agent and starts no other; a name it does not run counts as stopped', async () => {
    expect(
      await provider.stop({
        pool: 'h100',
        machines: [
          { name: 'h100-1', providerId: `local:${firstPid}` },
          { name: 'h100-9', providerId: null },
        ],
      }),
    ).toEqual(['h100-1', 'h100-9']);
    expect(alive(firstPid)).toBe(false);
    expect(logs.some((l) => l.includes('agent h100-1 stopped'))).toBe(true);
    // No restart follows a stop.
    await new Promise((r) => setTimeout(r, 1500));
    expect(logs.filter((l) => l.includes('started agent h100-1'))).toHaveLength(2);
  }, 15_000);
});

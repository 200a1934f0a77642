import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { RegisterResponse } from '../../src/api/contract/agent-protocol.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { heartbeatSplit } from '../../bench/fleet/sim-agent.js';
import { bearer, makeToken } from '../support/tokens.js';

const hostNow = () => performance.timeOrigin + performance.now();

/**
 * `x-gantry-timing` (GANTRY_HEARTBEAT_TIMING=1, docs/agent.md): a heartbeat's answer says when the
 * server read it, began its handler and handed the answer over, on the host's clock, so that the
 * fleet bench splits each round trip into the way in, the server's part and the way back.
 */
describe("a heartbeat's timing on the host's clock", () => {
  let cp: ControlPlane | undefined;
  let dir = '';
  afterEach(async () => {
    await cp?.stop();
    cp = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  /** A control plane with one machine registered; its heartbeat held `waitMs`, with the test's own times around it. */
  async function heldHeartbeat(heartbeatTiming: boolean, waitMs: number) {
    dir = mkdtempSync(join(tmpdir(), 'gantry-hb-timing-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, host: '127.0.0.1', heartbeatTiming }), { logger: false });
    await cp.start();
    const post = (url: string, body: unknown, token: string) =>
      cp!.app.inject({ method: 'POST', url, headers: { ...bearer(token), 'content-type': 'application/json' }, payload: JSON.stringify(body) });
    const agent = { version: 'test', host: 'test', pid: 1 };
    const spec = { name: 'm1', cpuMillis: 1000, memoryBytes: 2 ** 30, gpus: [], gpusDeclared: false, region: null, labels: {}, agent };
    const reg = (await post('/v1/agent/register', spec, await makeToken(cp.store, 'join'))).json<RegisterResponse>();
    const sentAt = hostNow();
    const res = await post(`/v1/agent/machines/${reg.machineId}/heartbeat`, { running: [], waitMs }, reg.credential!);
    const readAt = hostNow();
    expect(res.statusCode).toBe(200);
    return { res, sentAt, readAt };
  }

  it('says when the server read the heartbeat, began it and answered it, in order, within the round trip and past the hold', async () => {
    const { res, sentAt, readAt } = await heldHeartbeat(true, 150);
    const header = res.headers['x-gantry-timing'];
    expect(typeof header).toBe('string');
    const [read, handler, sent] = String(header).split(';').map(Number);
    expect(sentAt).toBeLessThanOrEqual(read!);
    expect(read).toBeLessThanOrEqual(handler!);
    expect(sent! - handler!).toBeGreaterThanOrEqual(149);
    expect(sent).toBeLessThanOrEqual(readAt);
    // The bench's split: its parts add up to the round trip less the hold.
    const split = heartbeatSplit(String(header), sentAt, readAt, 150)!;
    expect(split.inMs + split.preMs + split.serverOverMs + split.backMs).toBeCloseTo(readAt - sentAt - 150, 6);
    expect(Math.min(split.inMs, split.preMs, split.backMs)).toBeGreaterThanOrEqual(0);
  });

  it('is not sent unless asked for', async () => {
    const { res } = await heldHeartbeat(false, 20);
    expect(res.headers['x-gantry-timing']).toBeUndefined();
    expect(heartbeatSplit(null, 0, 1, 0)).toBeNull();
  });
});

/**
 * Typed ends across the wire (issue 26), through the real routes and passes on a fake clock: an
 * agent of the previous protocol, which says how an attempt ended only in its reason's words, is
 * still understood (its text typed once at the server's edge); an agent of protocol 2 is decided
 * on by its `end`'s kind, whatever its words say.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { RegisterResponse } from '../../src/api/contract/agent-protocol.js';
import { AGENT_PROTOCOL_VERSION } from '../../src/api/contract/attempt-end.js';
import { type FakeAgent, ProtocolHarness } from '../support/protocol-harness.js';

const retried = { maxAttempts: 3, backoff: { initialSeconds: 1, maxSeconds: 1 } };
const oneStage = (name: string) => ({ name, stages: [{ name: 'a', resources: { cpu: 1, memory: '64Mi' }, command: ['true'], retry: retried }] });

describe('attempt ends across the wire, on a fake clock', () => {
  let h: ProtocolHarness;
  afterEach(async () => {
    await h?.close();
  });

  /** Submits a one-stage job with retries left and has the agent take its first attempt. */
  async function firstAttempt(m: FakeAgent, name: string) {
    const id = await h.submit(oneStage(name));
    const [a] = await m.takeWork();
    return { id, a: a! };
  }
  const stageOf = async (id: string) => (await h.job(id)).stages[0]!;

  it('register says which protocol the server speaks', async () => {
    h = await ProtocolHarness.create();
    const r = await h.call(
      'POST',
      '/v1/agent/register',
      {
        name: 'm0',
        cpuMillis: 1000,
        memoryBytes: 2 ** 30,
        gpus: [],
        gpusDeclared: false,
        region: null,
        labels: {},
        agent: { version: 'old', host: 'h', pid: 1 },
      },
      h.tokens.join,
    );
    expect((JSON.parse(r.body) as RegisterResponse).settings.protocol).toBe(AGENT_PROTOCOL_VERSION);
    expect(AGENT_PROTOCOL_VERSION).toBe(3);
  });

  it('protocol 1: a spawn failure is not retried, a timeout is, a plain failure is; each typed by its words', async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');

    const spawn = await firstAttempt(m, 'spawn');
    expect((await m.finish(spawn.a, null, { reason: 'spawn failed: ENOENT: no-such-command is not in PATH' })).result).toBe('ok');
    let s = await stageOf(spawn.id);
    expect(s.state).toBe('failed');
    expect(s.attempts[0]).toMatchObject({ state: 'failed', endKind: 'spawn-failed', reason: 'spawn failed: ENOENT: no-such-command is not in PATH' });
    expect((await h.job(spawn.id)).state).toBe('failed');

    const slow = await firstAttempt(m, 'slow');
    expect((await m.finish(slow.a, null, { signal: 'SIGTERM', reason: 'timeout after 5 s' })).result).toBe('ok');
    s = await stageOf(slow.id);
    expect(s.state).toBe('ready');
    expect(s.attempts[0]).toMatchObject({ endKind: 'timeout', reason: 'timeout after 5 s', signal: 'SIGTERM' });

    const crash = await firstAttempt(m, 'crash');
    expect((await m.finish(crash.a, 2)).result).toBe('ok');
    expect(await stageOf(crash.id)).toMatchObject({ state: 'ready', attempts: [{ endKind: 'exited', exitCode: 2, reason: null }] });

    // The timed-out stage runs again after its backoff, and succeeds as a plain exit 0.
    h.advance(1000);
    const retry = (await m.takeWork()).find((x) => x.jobId === slow.id)!;
    expect(retry.attemptNumber).toBe(2);
    expect((await m.finish(retry, 0)).result).toBe('ok');
    expect((await stageOf(slow.id)).attempts.map((x) => [x.state, x.endKind])).toEqual([
      ['failed', 'timeout'],
      ['succeeded', 'exited'],
    ]);
  });

  it('protocol 2: the kind decides, never the words beside it', async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');

    // Spawn failed, whatever the reason text says: not retried.
    const spawn = await firstAttempt(m, 'spawn');
    await m.finish(spawn.a, null, { reason: 'timeout after 5 s', end: { kind: 'spawn-failed', detail: 'the binary is not there' } });
    expect(await stageOf(spawn.id)).toMatchObject({ state: 'failed', attempts: [{ endKind: 'spawn-failed', reason: 'the binary is not there' }] });

    // A timeout whose words read as a spawn failure: retried.
    const slow = await firstAttempt(m, 'slow');
    await m.finish(slow.a, null, { signal: 'SIGKILL', reason: 'spawn failed: not really', end: { kind: 'timeout', detail: null } });
    expect(await stageOf(slow.id)).toMatchObject({ state: 'ready', attempts: [{ endKind: 'timeout', reason: 'spawn failed: not really' }] });

    // A plain exit 0 with a typed end is a success.
    const ok = await firstAttempt(m, 'ok');
    await m.finish(ok.a, 0, { end: { kind: 'exited', detail: null } });
    expect((await h.job(ok.id)).state).toBe('succeeded');
  });

  it('the single-attempt complete route types a protocol 1 outcome too', async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');
    const { id, a } = await firstAttempt(m, 'single');
    const r = await h.call(
      'POST',
      `/v1/agent/attempts/${a.attemptId}/complete`,
      { token: a.token, exitCode: null, signal: null, reason: 'spawn failed: EACCES: ./run is not executable', outputs: [] },
      m.credential,
    );
    expect(r.statusCode).toBe(200);
    expect(await stageOf(id)).toMatchObject({ state: 'failed', attempts: [{ endKind: 'spawn-failed' }] });
  });
});

import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommandProvider } from './command-provider.js';
import { ProviderClosedError } from './provider.js';
import { parsePools, type PoolTemplate } from './pool-template.js';

/**
 * The command provider against a real executable: a bash script the test writes, which records
 * each request it reads on stdin and answers as $MODE says, as an operator's cloud script would.
 */
const SCRIPT = `#!/usr/bin/env bash
set -u
request=$(cat)
printf '%s\\n' "$request" >> requests.jsonl
case "$MODE" in
  start) echo '{"machines":[{"name":"h100-1","id":"i-0abc"},{"name":"h100-2"}],"note":"extra fields are ignored"}' ;;
  again) echo '{"machines":[{"name":"h100-1","id":"i-0abc"}]}' ;;
  stop) echo '{"stopped":["h100-1"]}' ;;
  quota) echo "asking the cloud" >&2; echo "quota exceeded" >&2; exit 3 ;;
  garbage) echo "Starting instances..." ;;
  unknown) echo '{"machines":[{"name":"h100-1"},{"name":"db-7"}]}' ;;
  echo-name) token=$(printf '%s' "$request" | sed 's/.*"joinToken":"\\([^"]*\\)".*/\\1/'); echo "{\\"machines\\":[{\\"name\\":\\"$token\\"}]}" ;;
  invalid) echo '{"machines":[{"id":"i-1"}]}' ;;
  echo) echo "got $request" >&2; exit 1 ;;
  hang) sleep 30 & echo $! > sleeper.pid; wait ;;
esac
`;

const TOKEN = 'gjt_secret_join_token_123';
let dir: string;
let pool: PoolTemplate;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'gantry-command-provider-'));
  writeFileSync(join(dir, 'cloud.sh'), SCRIPT);
  chmodSync(join(dir, 'cloud.sh'), 0o755);
  pool = parsePools([
    {
      name: 'h100',
      template: { cpu: 32, memory: '256Gi', gpus: { type: 'h100', count: 8, memory: '80Gi' }, region: 'us-east', labels: { disk: 'ssd' } },
      autoscale: { provider: 'command', command: './cloud.sh', min: 0, max: 2, idleSeconds: 60, bootTimeoutSeconds: 600 },
    },
  ])[0]!;
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function provider(mode: string, timeoutMs?: number): { p: CommandProvider; logs: string[] } {
  const logs: string[] = [];
  const p = new CommandProvider({
    command: './cloud.sh',
    baseDir: dir,
    env: { ...process.env, MODE: mode },
    log: (l) => logs.push(l),
    ...(timeoutMs !== undefined ? { timeoutMs } : {}),
  });
  return { p, logs };
}

/** A zombie (dead, not yet reaped by whoever adopted it) counts as gone. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
}

function lastRequest(): unknown {
  const lines = readFileSync(join(dir, 'requests.jsonl'), 'utf8').trim().split('\n');
  return JSON.parse(lines.at(-1)!);
}

const startReq = (names = ['h100-1', 'h100-2']) => ({
  pool: 'h100',
  template: pool.template,
  names,
  server: 'https://gantry.example:7070',
  joinToken: TOKEN,
  ca: '/etc/gantry/ca.pem',
});

describe('CommandProvider', () => {
  it('sends the documented start request on stdin and reads the machines it started', async () => {
    const { p } = provider('start');
    expect(await p.start(startReq())).toEqual([{ name: 'h100-1', providerId: 'i-0abc' }, { name: 'h100-2' }]);
    expect(lastRequest()).toEqual({
      action: 'start',
      pool: 'h100',
      template: { cpu: '32', memory: '256Gi', gpus: { type: 'h100', count: 8, memory: '80Gi' }, region: 'us-east', labels: { disk: 'ssd' } },
      count: 2,
      names: ['h100-1', 'h100-2'],
      server: 'https://gantry.example:7070',
      joinToken: TOKEN,
      ca: '/etc/gantry/ca.pem',
    });
  });

  it('passes the same names through when asked again (idempotence is the script’s), and a partial answer as it is', async () => {
    const { p } = provider('again');
    const first = await p.start(startReq());
    const second = await p.start(startReq());
    expect(first).toEqual([{ name: 'h100-1', providerId: 'i-0abc' }]);
    expect(second).toEqual(first);
    const lines = readFileSync(join(dir, 'requests.jsonl'), 'utf8').trim().split('\n').slice(-2);
    expect(lines.map((l) => (JSON.parse(l) as { names: string[] }).names)).toEqual([
      ['h100-1', 'h100-2'],
      ['h100-1', 'h100-2'],
    ]);
  });

  it('sends the documented stop request with the ids the start gave', async () => {
    const { p } = provider('stop');
    expect(
      await p.stop({
        pool: 'h100',
        machines: [
          { name: 'h100-1', providerId: 'i-0abc' },
          { name: 'h100-2', providerId: null },
        ],
      }),
    ).toEqual(['h100-1']);
    expect(lastRequest()).toEqual({ action: 'stop', pool: 'h100', machines: [{ name: 'h100-1', id: 'i-0abc' }, { name: 'h100-2' }] });
  });

  it('runs nothing for nothing to do', async () => {
    const { p } = provider('quota');
    expect(await p.start(startReq([]))).toEqual([]);
    expect(await p.stop({ pool: 'h100', machines: [] })).toEqual([]);
  });

  it('a non-zero exit names the command, its code and the end of its stderr', async () => {
    const { p, logs } = provider('quota');
    await expect(p.start(startReq())).rejects.toThrow(/^\.\/cloud\.sh exited 3: asking the cloud\nquota exceeded$/);
    expect(logs.at(-1)).toMatch(/cloud\.sh exited 3/);
  });

  it('an answer that is not JSON, names not asked for, or the wrong shape are refused by name', async () => {
    await expect(provider('garbage').p.start(startReq())).rejects.toThrow(
      /^\.\/cloud\.sh answered start with no JSON on stdout \(.*\): Starting instances\.\.\.$/,
    );
    await expect(provider('unknown').p.start(startReq())).rejects.toThrow('./cloud.sh answered start with names it was not asked to start: db-7');
    await expect(provider('invalid').p.start(startReq())).rejects.toThrow(/^\.\/cloud\.sh answered start with an invalid answer: \/machines\/0.*name/);
    await expect(provider('start').p.stop({ pool: 'h100', machines: [{ name: 'h100-1', providerId: null }] })).rejects.toThrow(
      /answered stop with an invalid answer: .*stopped/,
    );
  });

  it('never shows the join token, even when the script echoes its request', async () => {
    const { p, logs } = provider('echo');
    const err = await p.start(startReq()).catch((e: unknown) => e as Error);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/^\.\/cloud\.sh exited 1: got \{"action":"start"/);
    expect((err as Error).message).toContain('"joinToken":"<join token>"');
    expect((err as Error).message).not.toContain(TOKEN);
    // Echoed back as a machine's name: refused, and not quoted.
    const named = await provider('echo-name')
      .p.start(startReq())
      .catch((e: unknown) => e as Error);
    expect((named as Error).message).toBe('./cloud.sh answered start with names it was not asked to start: <join token>');
    expect(logs.join('\n')).not.toContain(TOKEN);
  });

  it('a run past its timeout is killed with its whole process group', async () => {
    const { p } = provider('hang', 500);
    const t0 = Date.now();
    await expect(p.start(startReq())).rejects.toThrow('./cloud.sh timed out after 500 ms (its process group was killed) (nothing on stderr)');
    expect(Date.now() - t0).toBeLessThan(5000);
    const sleeper = Number(readFileSync(join(dir, 'sleeper.pid'), 'utf8'));
    // The script's own child (sleep 30) went with it.
    expect(alive(sleeper)).toBe(false);
  });

  it('close() ends a run in flight, its whole process group, and refuses runs after it: a hung script does not hold the server’s shutdown', async () => {
    const { p } = provider('hang');
    const t0 = Date.now();
    const started = p.start(startReq());
    // The script has started once its sleeper's pid is written.
    const pidFile = join(dir, 'sleeper.pid');
    rmSync(pidFile, { force: true });
    while (!existsSync(pidFile) || readFileSync(pidFile, 'utf8').trim() === '') await new Promise((r) => setTimeout(r, 20));
    await p.close();
    await expect(started).rejects.toBeInstanceOf(ProviderClosedError);
    await expect(started).rejects.toThrow('./cloud.sh start was ended: the server is stopping (its process group was killed)');
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(alive(Number(readFileSync(pidFile, 'utf8')))).toBe(false);
    await expect(p.stop({ pool: 'h100', machines: [{ name: 'h100-1', providerId: null }] })).rejects.toBeInstanceOf(ProviderClosedError);
  });

  it('an executable that is not there says so', async () => {
    const p = new CommandProvider({ command: './missing.sh', baseDir: dir, log: () => {} });
    await expect(p.start(startReq())).rejects.toThrow(/^\.\/missing\.sh could not be run: .*ENOENT/);
  });
});

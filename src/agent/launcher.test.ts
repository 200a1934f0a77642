import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Launcher } from './launcher.js';
import { processGroupAlive } from './process-group.js';
import { attachProcess, EXIT_UNKNOWN } from './process-runner.js';

let dir: string;
let launcher: Launcher;
const lines: string[] = [];
const base = { PATH: process.env.PATH ?? '/usr/bin:/bin', KEPT: 'from the agent' };
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-launcher-'));
  launcher = new Launcher(base, (l) => lines.push(l));
});
afterEach(async () => {
  launcher.close();
  await rm(dir, { recursive: true, force: true });
});

let n = 0;
const opts = (command: string[], o: { env?: Record<string, string>; timeoutSeconds?: number; killGraceMs?: number } = {}) => {
  const id = `a${++n}`;
  return {
    attemptId: id,
    command,
    cwd: dir,
    env: { ...base, ...o.env },
    stdoutFile: join(dir, `${id}.out`),
    stderrFile: join(dir, `${id}.err`),
    statusFile: join(dir, `${id}.status`),
    killGraceMs: o.killGraceMs ?? 500,
    timeoutSeconds: o.timeoutSeconds ?? null,
  };
};
const read = (f: string) => readFile(f, 'utf8').catch(() => '');
const readSoFar = (f: string) => {
  try {
    return readFileSync(f, 'utf8');
  } catch {
    return '';
  }
};
const until = async (cond: () => boolean, ms = 3000) => {
  for (const end = Date.now() + ms; Date.now() < end && !cond(); ) await new Promise((r) => setTimeout(r, 10));
  return cond();
};

describe('Launcher', () => {
  it("runs the command in its own group, with its env, cwd and files, and reports its exit code", async () => {
    const o = opts(['sh', '-c', 'read -r _ _ _ _ g _ < /proc/$$/stat; echo "$GREETING $KEPT from $(pwd) in group $g"; echo oops >&2; exit 3'], { env: { GREETING: "it's" } });
    const h = launcher.run(o)!;
    const pid = await h.started;
    expect(pid).toBeGreaterThan(0);
    expect(await h.done).toEqual({ exitCode: 3, signal: null, reason: null });
    expect(await read(o.stdoutFile)).toBe(`it's from the agent from ${dir} in group ${pid}\n`);
    expect(await read(o.stderrFile)).toBe('oops\n');
    expect(await read(o.statusFile)).toBe('3\n');
  });

  it('reports a signal, kills the group within the grace, and KILLs what ignores TERM', async () => {
    expect(await launcher.run(opts(['sh', '-c', 'kill -USR1 $$']))!.done).toEqual({ exitCode: null, signal: 'SIGUSR1', reason: null });
    const h = launcher.run(opts(['sh', '-c', 'sleep 30 & sleep 30 & wait'], { killGraceMs: 2000 }))!;
    const pgid = (await h.started)!;
    await new Promise((r) => setTimeout(r, 100));
    await h.kill('canceled');
    expect(processGroupAlive(pgid)).toBe(false);
    expect(await h.done).toEqual({ exitCode: null, signal: 'SIGTERM', reason: 'killed: canceled' });
    const o = opts(['sh', '-c', 'trap "" TERM; echo ready; sleep 30'], { killGraceMs: 300 });
    const stubborn = launcher.run(o)!;
    expect(await until(() => readSoFar(o.stdoutFile).includes('ready'))).toBe(true);
    await stubborn.kill('stale');
    expect(await stubborn.done).toEqual({ exitCode: null, signal: 'SIGKILL', reason: 'killed: stale' });
  });

  it('times out, sweeps what the command left behind, and tells a command that cannot start from one that exits 127', async () => {
    expect((await launcher.run(opts(['sleep', '30'], { timeoutSeconds: 0.2 }))!.done).reason).toBe('timeout after 0.2 s');
    const t0 = Date.now();
    const left = launcher.run(opts(['sh', '-c', 'sleep 30 & echo bye']))!;
    const pgid = (await left.started)!;
    expect(await left.done).toEqual({ exitCode: 0, signal: null, reason: null });
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(processGroupAlive(pgid)).toBe(false);
    expect((await launcher.run(opts(['no-such-command-xyz']))!.done).reason).toMatch(/^spawn failed: ENOENT/);
    expect(await launcher.run(opts(['sh', '-c', 'exit 127']))!.done).toEqual({ exitCode: 127, signal: null, reason: null });
  });

  it('passes any argument through untouched, quotes and newlines included', async () => {
    const weird = ["it's", 'a "b"', '$HOME', '`x`', 'line\nbreak', '', '\\'];
    const o = opts(['printf', '%s|', ...weird]);
    expect((await launcher.run(o)!.done).exitCode).toBe(0);
    expect(await read(o.stdoutFile)).toBe(weird.map((w) => `${w}|`).join(''));
  });

  it('leaves to the caller what it cannot take: a variable that is no shell name', () => {
    expect(launcher.run(opts(['true'], { env: { 'not-a-name': 'x' } }))).toBeNull();
  });

  it('settles a job whose shim was killed from outside, with no status, as unknown', async () => {
    const h = launcher.run(opts(['sleep', '30']))!;
    const pgid = (await h.started)!;
    await new Promise((r) => setTimeout(r, 100));
    execFileSync('kill', ['-KILL', '--', `-${pgid}`]);
    expect(await h.done).toEqual({ exitCode: null, signal: null, reason: EXIT_UNKNOWN });
  });

  it('a job outlives the launcher, and can be followed by its pid (an agent restarted)', async () => {
    const o = opts(['sh', '-c', 'sleep 0.5; exit 5']);
    const h = launcher.run(o)!;
    const pid = (await h.started)!;
    h.leave();
    launcher.close();
    const attached = attachProcess({ pid, statusFile: o.statusFile, killGraceMs: 500, pollMs: 20 });
    expect(await attached.done).toEqual({ exitCode: 5, signal: null, reason: null });
  });
});

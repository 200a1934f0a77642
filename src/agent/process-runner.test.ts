import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { processGroupAlive } from './process-group.js';
import { runProcess, type OutputChunk } from './process-runner.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-runner-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

/** The group's last zombies leave when init reaps them, which is not ours to hurry. */
async function groupGone(pgid: number, ms = 5000): Promise<boolean> {
  return until(() => {
    try {
      process.kill(-pgid, 0);
      return false;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ESRCH';
    }
  }, ms);
}

async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (cond()) return true;
    await new Promise((r) => setTimeout(r, 10));
  }
  return cond();
}

describe('runProcess', () => {
  it('passes env and cwd, captures both streams to the callback and the log file, reports the exit code', async () => {
    const chunks: OutputChunk[] = [];
    const logFile = join(dir, 'out.log');
    const h = runProcess({
      command: ['sh', '-c', 'echo "$GREETING from $(pwd)"; echo oops >&2; exit 3'],
      cwd: dir,
      env: { ...env, GREETING: 'hello' },
      logFile,
      killGraceMs: 500,
      onOutput: (c) => chunks.push(c),
    });
    expect(h.pid).toBeGreaterThan(0);
    const r = await h.done;
    expect(r).toEqual({ exitCode: 3, signal: null, reason: null });
    const out = chunks.filter((c) => c.stream === 'stdout').map((c) => c.data).join('');
    const err = chunks.filter((c) => c.stream === 'stderr').map((c) => c.data).join('');
    expect(out).toMatch(/^hello from .*gantry-runner-/);
    expect(err).toBe('oops\n');
    const logged = await readFile(logFile, 'utf8');
    expect(logged).toContain('hello from');
    expect(logged).toContain('oops');
  });

  it('reports the signal that ended the process', async () => {
    const r = await runProcess({ command: ['sh', '-c', 'kill -USR1 $$'], cwd: dir, env, killGraceMs: 500 }).done;
    expect(r).toEqual({ exitCode: null, signal: 'SIGUSR1', reason: null });
  });

  it('kill() takes down the whole process group within the grace', async () => {
    const h = runProcess({ command: ['sh', '-c', 'sleep 30 & sleep 30 & wait'], cwd: dir, env, killGraceMs: 2000 });
    const pgid = h.pid!;
    expect(processGroupAlive(pgid)).toBe(true);
    const t0 = Date.now();
    await h.kill('cancelled');
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(processGroupAlive(pgid)).toBe(false);
    expect(await groupGone(pgid)).toBe(true);
    const r = await h.done;
    expect(r.reason).toBe('killed: cancelled');
    expect(r.signal).toBe('SIGTERM');
  });

  it('KILLs a group that ignores TERM once the grace has passed', async () => {
    const chunks: string[] = [];
    const h = runProcess({
      command: ['sh', '-c', 'trap "" TERM; echo ready; sleep 30 & wait'],
      cwd: dir,
      env,
      killGraceMs: 300,
      onOutput: (c) => chunks.push(c.data),
    });
    // Until the trap is set, TERM would still work; wait for it to be in place.
    expect(await until(() => chunks.join('').includes('ready'), 3000)).toBe(true);
    const t0 = Date.now();
    await h.kill('stale');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
    expect(processGroupAlive(h.pid!)).toBe(false);
    expect(await groupGone(h.pid!)).toBe(true);
    expect(await h.done).toEqual({ exitCode: null, signal: 'SIGKILL', reason: 'killed: stale' });
  });

  it('kills the group on timeout and says so', async () => {
    const h = runProcess({ command: ['sleep', '30'], cwd: dir, env, killGraceMs: 500, timeoutSeconds: 0.2 });
    const r = await h.done;
    expect(r).toEqual({ exitCode: null, signal: 'SIGTERM', reason: 'timeout after 0.2 s' });
    expect(processGroupAlive(h.pid!)).toBe(false);
  });

  it('sweeps descendants left behind when the leader exits, so done does not wait for them', async () => {
    const t0 = Date.now();
    const h = runProcess({ command: ['sh', '-c', 'sleep 30 & echo bye'], cwd: dir, env, killGraceMs: 500 });
    expect(await h.done).toEqual({ exitCode: 0, signal: null, reason: null });
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(processGroupAlive(h.pid!)).toBe(false);
  });

  it('reports a spawn failure as a reason, not an exception', async () => {
    const h = runProcess({ command: ['/nonexistent/binary-xyz'], cwd: dir, env, killGraceMs: 500 });
    const r = await h.done;
    expect(r.exitCode).toBeNull();
    expect(r.signal).toBeNull();
    expect(r.reason).toMatch(/^spawn failed: .*ENOENT/);
    await h.kill('too late'); // harmless
    const empty = await runProcess({ command: [], cwd: dir, env, killGraceMs: 500 }).done;
    expect(empty.reason).toBe('spawn failed: command is empty');
  });

  it('kill after a plain exit changes nothing', async () => {
    const h = runProcess({ command: ['true'], cwd: dir, env, killGraceMs: 500 });
    await h.done;
    await h.kill('late');
    expect(await h.done).toEqual({ exitCode: 0, signal: null, reason: null });
  });
});

import { readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { processGroupAlive } from './process-group.js';
import { attachProcess, EXIT_UNKNOWN, runProcess } from './process-runner.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-runner-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
/** Where the command's two streams go. */
const files = () => ({ stdoutFile: join(dir, 'stdout.log'), stderrFile: join(dir, 'stderr.log'), statusFile: join(dir, 'status') });
const read = (f: string) => readFile(f, 'utf8').catch(() => '');

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
  it('passes env and cwd, has the command write each stream into its file, reports the exit code', async () => {
    const f = files();
    const h = runProcess({
      command: ['sh', '-c', 'echo "$GREETING from $(pwd)"; echo oops >&2; exit 3'],
      cwd: dir,
      env: { ...env, GREETING: 'hello' },
      ...f,
      killGraceMs: 500,
    });
    expect(h.pid).toBeGreaterThan(0);
    const r = await h.done;
    expect(r).toEqual({ kind: 'exited', exitCode: 3, signal: null, reason: null });
    expect(await read(f.stdoutFile)).toMatch(/^hello from .*gantry-runner-/);
    expect(await read(f.stderrFile)).toBe('oops\n');
  });

  it('appends to the files, never truncates them', async () => {
    const f = files();
    await runProcess({ command: ['sh', '-c', 'echo one'], cwd: dir, env, ...f, killGraceMs: 500 }).done;
    await runProcess({ command: ['sh', '-c', 'echo two'], cwd: dir, env, ...f, killGraceMs: 500 }).done;
    expect(await read(f.stdoutFile)).toBe('one\ntwo\n');
  });

  it('reports the signal that ended the process', async () => {
    const r = await runProcess({ command: ['sh', '-c', 'kill -USR1 $$'], cwd: dir, env, ...files(), killGraceMs: 500 }).done;
    expect(r).toEqual({ kind: 'signaled', exitCode: null, signal: 'SIGUSR1', reason: null });
  });

  it('kill() takes down the whole process group within the grace', async () => {
    const h = runProcess({ command: ['sh', '-c', 'sleep 30 & sleep 30 & wait'], cwd: dir, env, ...files(), killGraceMs: 2000 });
    const pgid = h.pid!;
    // Started: a TERM that reaches the shim before it has forked the command misses the command (the KILL after the grace does not).
    await new Promise((r) => setTimeout(r, 100));
    expect(processGroupAlive(pgid)).toBe(true);
    const t0 = Date.now();
    await h.kill('cancelled');
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(processGroupAlive(pgid)).toBe(false);
    expect(await groupGone(pgid)).toBe(true);
    const r = await h.done;
    expect(r.reason).toBe('killed: cancelled');
    expect(r.kind).toBe('killed');
    expect(r.signal).toBe('SIGTERM');
  });

  it('KILLs a group that ignores TERM once the grace has passed', async () => {
    const f = files();
    const h = runProcess({ command: ['sh', '-c', 'trap "" TERM; echo ready; sleep 30 & wait'], cwd: dir, env, ...f, killGraceMs: 300 });
    // Until the trap is set, TERM would still work; wait for it to be in place.
    expect(await until(() => readFileSync(f.stdoutFile, 'utf8').includes('ready'), 3000)).toBe(true);
    const t0 = Date.now();
    await h.kill('stale');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
    expect(processGroupAlive(h.pid!)).toBe(false);
    expect(await groupGone(h.pid!)).toBe(true);
    expect(await h.done).toEqual({ kind: 'killed', exitCode: null, signal: 'SIGKILL', reason: 'killed: stale' });
  });

  it('kills the group on timeout and says so', async () => {
    const h = runProcess({ command: ['sleep', '30'], cwd: dir, env, ...files(), killGraceMs: 500, timeoutSeconds: 0.2 });
    const r = await h.done;
    expect(r).toEqual({ kind: 'timeout', exitCode: null, signal: 'SIGTERM', reason: 'timeout after 0.2 s' });
    expect(processGroupAlive(h.pid!)).toBe(false);
  });

  it('sweeps descendants left behind when the leader exits, so done does not wait for them', async () => {
    const t0 = Date.now();
    const h = runProcess({ command: ['sh', '-c', 'sleep 30 & echo bye'], cwd: dir, env, ...files(), killGraceMs: 500 });
    expect(await h.done).toEqual({ kind: 'exited', exitCode: 0, signal: null, reason: null });
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(processGroupAlive(h.pid!)).toBe(false);
  });

  it('reports a spawn failure as a reason, not an exception', async () => {
    const h = runProcess({ command: ['/nonexistent/binary-xyz'], cwd: dir, env, ...files(), killGraceMs: 500 });
    const r = await h.done;
    expect(r.exitCode).toBeNull();
    expect(r.signal).toBeNull();
    expect(r.reason).toMatch(/^spawn failed: .*ENOENT/);
    expect(r.kind).toBe('spawn-failed');
    await h.kill('too late'); // harmless
    const empty = await runProcess({ command: [], cwd: dir, env, ...files(), killGraceMs: 500 }).done;
    expect(empty.reason).toBe('spawn failed: command is empty');
  });

  it('kill after a plain exit changes nothing', async () => {
    const h = runProcess({ command: ['true'], cwd: dir, env, ...files(), killGraceMs: 500 });
    await h.done;
    await h.kill('late');
    expect(await h.done).toEqual({ kind: 'exited', exitCode: 0, signal: null, reason: null });
  });
});

describe('the shim', () => {
  it('records the exit status, and the signal as 128 + its number', async () => {
    const f = files();
    await runProcess({ command: ['sh', '-c', 'exit 7'], cwd: dir, env, ...f, killGraceMs: 500 }).done;
    expect(await read(f.statusFile)).toBe('7\n');
    const r = await runProcess({ command: ['sh', '-c', 'kill -TERM $$'], cwd: dir, env, ...f, killGraceMs: 500 }).done;
    expect(r).toEqual({ kind: 'signaled', exitCode: null, signal: 'SIGTERM', reason: null });
    expect(await read(f.statusFile)).toBe('143\n');
  });

  it('tells a command that cannot start from one that exits 127', async () => {
    writeFileSync(join(dir, 'not-executable'), '#!/bin/sh\n');
    const r = await runProcess({ command: ['./not-executable'], cwd: dir, env, ...files(), killGraceMs: 500 }).done;
    expect(r.reason).toMatch(/^spawn failed: EACCES: .*not-executable is not executable/);
    const missing = await runProcess({ command: ['no-such-command-xyz'], cwd: dir, env, ...files(), killGraceMs: 500 }).done;
    expect(missing.reason).toMatch(/^spawn failed: ENOENT: no-such-command-xyz is not in PATH/);
    const ran = await runProcess({ command: ['sh', '-c', 'exit 127'], cwd: dir, env, ...files(), killGraceMs: 500 }).done;
    expect(ran).toEqual({ kind: 'exited', exitCode: 127, signal: null, reason: null });
  });
});

describe('attachProcess (an agent restarted while its command runs)', () => {
  it('follows a command it did not start to its end, and reads how it ended from the status file', async () => {
    const f = files();
    const started = runProcess({ command: ['sh', '-c', 'sleep 0.4; exit 7'], cwd: dir, env, ...f, killGraceMs: 500 });
    const attached = attachProcess({ pid: started.pid!, statusFile: f.statusFile, killGraceMs: 500, pollMs: 20 });
    expect(await attached.done).toEqual({ kind: 'exited', exitCode: 7, signal: null, reason: null });
    await started.done;
  });

  it('kills it like any other, and times it out', async () => {
    const f = files();
    const started = runProcess({ command: ['sleep', '30'], cwd: dir, env, ...f, killGraceMs: 500 });
    const attached = attachProcess({ pid: started.pid!, statusFile: f.statusFile, killGraceMs: 500, pollMs: 20 });
    await new Promise((r) => setTimeout(r, 100)); // the shim's traps in place
    await attached.kill('canceled');
    expect(await attached.done).toEqual({ kind: 'killed', exitCode: null, signal: 'SIGTERM', reason: 'killed: canceled' });
    expect(processGroupAlive(started.pid!)).toBe(false);
    const again = runProcess({ command: ['sleep', '30'], cwd: dir, env, ...files(), killGraceMs: 500 });
    const timed = attachProcess({ pid: again.pid!, statusFile: join(dir, 'status'), killGraceMs: 500, pollMs: 20, timeout: { seconds: 60, remainingMs: 100 } });
    expect(await timed.done).toMatchObject({ kind: 'timeout', reason: 'timeout after 60 s' });
  });

  it('says so when the command is gone with no status recorded', async () => {
    const h = attachProcess({ pid: 2 ** 22 + 17, statusFile: join(dir, 'none'), killGraceMs: 100, pollMs: 20 });
    expect(await h.done).toEqual({ kind: 'unknown', exitCode: null, signal: null, reason: EXIT_UNKNOWN });
  });
});

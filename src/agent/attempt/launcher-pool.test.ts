import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LauncherPool, launcherCount } from './launcher-pool.js';
import { bashLauncher, launcherPrograms, type LauncherProgram } from './launcher-programs.js';

const base = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const python = launcherPrograms({ PATH: base.PATH, GANTRY_AGENT_LAUNCHER: 'python' })[0];
const compiled = launcherPrograms({ PATH: base.PATH, GANTRY_AGENT_LAUNCHER: 'c' })[0];
const programs: [string, LauncherProgram][] = [
  ['bash', bashLauncher],
  ...(python ? [['python', python] as [string, LauncherProgram]] : []),
  ...(compiled ? [['c', compiled] as [string, LauncherProgram]] : []),
];
let dir: string;
let pool: LauncherPool | null = null;
let n = 0;
const opts = (command: string[]) => {
  const id = `p${++n}`;
  return {
    attemptId: id,
    command,
    cwd: dir,
    envChanges: {},
    stdoutFile: join(dir, `${id}.out`),
    stderrFile: join(dir, `${id}.err`),
    statusFile: join(dir, `${id}.status`),
    killGraceMs: 500,
    timeoutSeconds: null,
  };
};
/** Who started a process: its parent, read from /proc while it runs (the launcher, or bash's shim whose parent is the launcher). */
const parentOf = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-launcher-pool-'));
});
afterEach(async () => {
  pool?.close();
  pool = null;
  await rm(dir, { recursive: true, force: true });
});

describe.each(programs)('LauncherPool (%s)', (_name, program) => {
  it('starts a burst on both launchers, and each command ends through the one that started it', async () => {
    pool = new LauncherPool(base, () => {}, [program], 2);
    const handles = Array.from({ length: 6 }, () => pool!.run(opts(['sh', '-c', 'sleep 0.5; exit 7']))!);
    const pids = await Promise.all(handles.map((h) => h.started));
    // The pid is the group's leader: the command under Python, its shim under bash; the launcher is its parent either way.
    const starters = new Set(pids.map((pid) => parentOf(pid!)));
    expect(starters.size).toBe(2);
    for (const h of handles) expect(await h.done).toEqual({ kind: 'exited', exitCode: 7, signal: null, reason: null });
  });

  it('with one launcher, every command has the same starter', async () => {
    pool = new LauncherPool(base, () => {}, [program], 1);
    const handles = Array.from({ length: 4 }, () => pool!.run(opts(['sleep', '0.3']))!);
    const pids = await Promise.all(handles.map((h) => h.started));
    const starters = new Set(pids.map((pid) => parentOf(pid!)));
    expect(starters.size).toBe(1);
    for (const h of handles) expect((await h.done).exitCode).toBe(0);
  });
});

describe('launcherCount', () => {
  it('is 2 by default, takes 1 to 8, and names what it accepts otherwise', () => {
    expect(launcherCount({})).toBe(2);
    expect(launcherCount({ GANTRY_AGENT_LAUNCHERS: '1' })).toBe(1);
    expect(launcherCount({ GANTRY_AGENT_LAUNCHERS: '8' })).toBe(8);
    for (const bad of ['0', '9', '1.5', 'two']) expect(() => launcherCount({ GANTRY_AGENT_LAUNCHERS: bad })).toThrow(/from 1 to 8, not "/);
  });

  it('a pool whose launchers have no program runs nothing (the caller spawns)', () => {
    pool = new LauncherPool(base, () => {}, [], 2);
    expect(pool.program).toBeNull();
    expect(pool.run(opts(['true']))).toBeNull();
  });
});

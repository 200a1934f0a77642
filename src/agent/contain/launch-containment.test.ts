/**
 * LaunchContainment through every way a command is started (the C, Python and bash launchers, the
 * agent's own spawn): the command is in the given cgroups before it execs (and so is what it forks,
 * a `setsid` child included), runs as the given user with no capabilities and no new privileges,
 * under umask 022, behind the wrap. Real cgroups of this machine (v1 pids, the v2 hierarchy), real
 * uids: needs root and both hierarchies, and says so when it skips.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Launcher } from '../attempt/launcher.js';
import { bashLauncher, launcherPrograms, type LauncherProgram } from '../attempt/launcher-programs.js';
import { runProcess, type ProcessHandle, type RunProcessOptions } from '../attempt/process-runner.js';
import type { LaunchContainment } from './launch-containment.js';

const V1 = '/sys/fs/cgroup/pids';
const V2 = '/sys/fs/cgroup/unified';
const root = process.getuid?.() === 0;
const hierarchies = existsSync(join(V1, 'cgroup.procs')) && existsSync(join(V2, 'cgroup.procs'));
const why = !root ? 'not root: cannot make cgroups or switch users' : !hierarchies ? `no ${V1} or ${V2} hierarchy here` : '';
if (why) console.warn(`launch-containment.test.ts skipped: ${why}`);

const UID = 61184 + 900;
const base = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const python = launcherPrograms({ PATH: base.PATH, GANTRY_AGENT_LAUNCHER: 'python' })[0];
// Built by the tests' global setup (test/support/c-launcher-build.ts) wherever a C compiler is.
const compiled = launcherPrograms({ PATH: base.PATH, GANTRY_AGENT_LAUNCHER: 'c' })[0];
type Start = (o: RunProcessOptions, attemptId: string) => ProcessHandle;
const launchers: Launcher[] = [];
const through = (program: LauncherProgram): Start => {
  return (o, attemptId) => {
    const l = new Launcher(base, () => {}, [program]);
    launchers.push(l);
    return l.run({ ...o, attemptId, envChanges: o.env })!;
  };
};
const ways: [string, Start][] = [
  ['the agent itself', (o) => runProcess(o)],
  ['the bash launcher', through(bashLauncher)],
  ...(python ? [['the python launcher', through(python)] as [string, Start]] : []),
  ...(compiled ? [['the C launcher', through(compiled)] as [string, Start]] : []),
];

let dir: string;
const cgroups: string[] = [];
let n = 0;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-contain-'));
  chmodSync(dir, 0o755);
});
afterEach(() => {
  for (const l of launchers.splice(0)) l.close();
});
afterAll(async () => {
  for (const cg of cgroups.reverse()) {
    try {
      for (const pid of readFileSync(join(cg, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) process.kill(Number(pid), 'SIGKILL');
    } catch {}
    for (let i = 0; i < 50; i++) {
      try {
        rmdirSync(cg);
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  }
  await rm(dir, { recursive: true, force: true });
});

function makeCgroups(): LaunchContainment['procsFiles'] {
  const name = `gantry-launch-test-${process.pid}-${++n}`;
  const made = [join(V1, name), join(V2, name)];
  for (const cg of made) {
    mkdirSync(cg);
    cgroups.push(cg);
  }
  return made.map((cg) => join(cg, 'cgroup.procs'));
}

const files = (id: string) => ({ stdoutFile: join(dir, `${id}.out`), stderrFile: join(dir, `${id}.err`), statusFile: join(dir, `${id}.status`) });

describe.skipIf(why !== '').each(ways)('a contained command started by %s', (_name, start) => {
  it('is in its cgroups with its setsid child, as its user, without privileges, under umask 022', async () => {
    const procs = makeCgroups();
    const id = `c${++n}`;
    const script = [
      'id -u; id -g; id -G',
      'grep -E "^(CapEff|NoNewPrivs)" /proc/self/status',
      'umask',
      'setsid sh -c "sleep 30" & sleep 0.2',
      'cat /proc/self/cgroup',
    ].join('; ');
    const o: RunProcessOptions = {
      command: ['sh', '-c', script],
      cwd: dir,
      env: base,
      ...files(id),
      killGraceMs: 200,
      contain: { procsFiles: procs, user: { uid: UID, gid: UID }, wrap: [] },
    };
    const h = start(o, id);
    const r = await h.done;
    const out = await readFile(o.stdoutFile, 'utf8');
    expect(r, out + (await readFile(o.stderrFile, 'utf8'))).toMatchObject({ kind: 'exited', exitCode: 0 });
    const lines = out.split('\n');
    expect(lines.slice(0, 3)).toEqual([String(UID), String(UID), String(UID)]);
    expect(out).toContain('CapEff:\t0000000000000000');
    expect(out).toContain('NoNewPrivs:\t1');
    expect(lines).toContain('0022');
    const name = procs[0]!.split('/').at(-2)!;
    expect(out).toMatch(new RegExp(`:pids:/.*${name}\\n`));
    expect(out).toMatch(new RegExp(`^0::/.*${name}$`, 'm'));
    // The setsid child left the process group, not the cgroups: it is still in both.
    const left = (f: string) => readFileSync(f, 'utf8').split('\n').filter(Boolean).map(Number);
    expect(left(procs[0]!).length).toBeGreaterThan(0);
    expect(left(procs[1]!)).toEqual(left(procs[0]!));
    for (const pid of left(procs[0]!)) expect(Number(execFileSync('stat', ['-c', '%u', `/proc/${pid}`], { encoding: 'utf8' }).trim())).toBe(UID);
    execFileSync('sh', ['-c', `echo 1 > ${join(procs[1]!, '..', 'cgroup.kill')}`]);
  });

  it('runs behind the wrap, and without a user stays the agent', async () => {
    const id = `w${++n}`;
    const o: RunProcessOptions = {
      command: ['sh', '-c', 'echo "$0 $1 $(id -u)"', 'b'],
      cwd: dir,
      env: base,
      ...files(id),
      killGraceMs: 200,
      contain: { procsFiles: [], user: null, wrap: ['/usr/bin/env', 'WRAPPED=1'] },
    };
    const r = await start({ ...o, command: ['sh', '-c', 'echo "$WRAPPED $(id -u)"'] }, id).done;
    expect(r).toMatchObject({ kind: 'exited', exitCode: 0 });
    expect(await readFile(o.stdoutFile, 'utf8')).toBe('1 0\n');
  });

  it('does not start a command it cannot contain: an unwritable cgroup', async () => {
    const id = `f${++n}`;
    const o: RunProcessOptions = {
      command: ['sh', '-c', 'echo ran'],
      cwd: dir,
      env: base,
      ...files(id),
      killGraceMs: 200,
      contain: { procsFiles: [join(dir, 'no-such-cgroup', 'cgroup.procs')], user: null, wrap: [] },
    };
    const r = await start(o, id).done;
    expect(r.kind === 'spawn-failed' || (r.kind === 'exited' && r.exitCode === 126)).toBe(true);
    expect(await readFile(o.stdoutFile, 'utf8').catch(() => '')).toBe('');
    expect(await readFile(o.stderrFile, 'utf8')).toMatch(/gantry: cannot (contain the command|join the cgroup)/);
  });
});

describe.skipIf(why !== '')('the command found as its user would find it', () => {
  it("skips a PATH entry its user cannot enter (root's ~/.pyenv/shims) for the next one, and says so when there is none", async () => {
    const closed = await mkdtemp(join(tmpdir(), 'gantry-closed-path-'));
    const bin = join(closed, 'bin');
    mkdirSync(bin);
    writeFileSync(join(bin, 'true'), '#!/bin/sh\necho from-closed\n', { mode: 0o755 });
    writeFileSync(join(bin, 'only-here'), '#!/bin/sh\necho only\n', { mode: 0o755 });
    chmodSync(closed, 0o700);
    try {
      for (const [name, start] of ways) {
        const id = `p${++n}`;
        const o: RunProcessOptions = {
          command: ['true'],
          cwd: dir,
          env: { PATH: `${bin}:/usr/bin:/bin` },
          ...files(id),
          killGraceMs: 200,
          contain: { procsFiles: [], user: { uid: UID, gid: UID }, wrap: [] },
        };
        expect(await start(o, id).done, name).toMatchObject({ kind: 'exited', exitCode: 0 });
        expect(await readFile(o.stdoutFile, 'utf8'), name).toBe('');
        const r = await start({ ...o, command: ['only-here'], ...files(`${id}x`) }, `${id}x`).done;
        expect(r, name).toMatchObject({ kind: 'spawn-failed' });
        expect(r.reason, name).toMatch(/only-here is not executable by uid/);
      }
    } finally {
      await rm(closed, { recursive: true, force: true });
    }
  });
});

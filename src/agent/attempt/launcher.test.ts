import { execFileSync, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Launcher } from './launcher.js';
import { bashLauncher, LAUNCHER_C, launcherPrograms, pythonLauncher, type LauncherProgram } from './launcher-programs.js';
import { processGroupAlive } from './process-group.js';
import { attachProcess, EXIT_UNKNOWN } from './process-runner.js';

let dir: string;
let launcher: Launcher;
const lines: string[] = [];
const base = { PATH: process.env.PATH ?? '/usr/bin:/bin', KEPT: 'from the agent' };
const python = launcherPrograms({ PATH: base.PATH, GANTRY_AGENT_LAUNCHER: 'python' })[0];
// Built by the tests' global setup (test/support/c-launcher-build.ts) wherever a C compiler is.
const compiled = launcherPrograms({ PATH: base.PATH, GANTRY_AGENT_LAUNCHER: 'c' })[0];
const programs: [string, LauncherProgram][] = [
  ['bash', bashLauncher],
  ...(python ? [['python', python] as [string, LauncherProgram]] : []),
  ...(compiled ? [['c', compiled] as [string, LauncherProgram]] : []),
];
afterEach(async () => {
  launcher?.close();
  await rm(dir, { recursive: true, force: true });
});

let n = 0;
const opts = (command: string[], o: { env?: Record<string, string>; timeoutSeconds?: number; killGraceMs?: number } = {}) => {
  const id = `a${++n}`;
  return {
    attemptId: id,
    command,
    cwd: dir,
    envChanges: o.env ?? {},
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
  for (const end = Date.now() + ms; Date.now() < end && !cond();) await new Promise((r) => setTimeout(r, 10));
  return cond();
};

if (!python) console.warn('launcher.test.ts: no python3 in PATH: the Python launcher is not tested here');
if (!compiled) console.warn(`launcher.test.ts: no ${LAUNCHER_C} (no C compiler): the C launcher is not tested here`);

describe.each(programs)('Launcher (%s)', (name, program) => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gantry-launcher-'));
    launcher = new Launcher(base, (l) => lines.push(l), [program]);
  });

  it('runs the command in its own group, with its env, cwd and files, and reports its exit code', async () => {
    const o = opts(['sh', '-c', 'read -r _ _ _ _ g _ < /proc/$$/stat; echo "$GREETING $KEPT from $(pwd) in group $g"; echo oops >&2; exit 3'], {
      env: { GREETING: "it's" },
    });
    const h = launcher.run(o)!;
    const pid = await h.started;
    expect(pid).toBeGreaterThan(0);
    expect(await h.done).toEqual({ kind: 'exited', exitCode: 3, signal: null, reason: null });
    expect(await read(o.stdoutFile)).toBe(`it's from the agent from ${dir} in group ${pid}\n`);
    expect(await read(o.stderrFile)).toBe('oops\n');
    expect(await read(o.statusFile)).toBe('3\n');
  });

  it('reports a signal, kills the group within the grace, and KILLs what ignores TERM', async () => {
    expect(await launcher.run(opts(['sh', '-c', 'kill -USR1 $$']))!.done).toEqual({ kind: 'signaled', exitCode: null, signal: 'SIGUSR1', reason: null });
    const h = launcher.run(opts(['sh', '-c', 'sleep 30 & sleep 30 & wait'], { killGraceMs: 2000 }))!;
    const pgid = (await h.started)!;
    await new Promise((r) => setTimeout(r, 100));
    await h.kill('canceled');
    expect(processGroupAlive(pgid)).toBe(false);
    expect(await h.done).toEqual({ kind: 'killed', exitCode: null, signal: 'SIGTERM', reason: 'killed: canceled' });
    const o = opts(['sh', '-c', 'trap "" TERM; echo ready; sleep 30'], { killGraceMs: 300 });
    const stubborn = launcher.run(o)!;
    expect(await until(() => readSoFar(o.stdoutFile).includes('ready'))).toBe(true);
    await stubborn.kill('stale');
    expect(await stubborn.done).toEqual({ kind: 'killed', exitCode: null, signal: 'SIGKILL', reason: 'killed: stale' });
  });

  it('times out, sweeps what the command left behind, and tells a command that cannot start from one that exits 127', async () => {
    expect(await launcher.run(opts(['sleep', '30'], { timeoutSeconds: 0.2 }))!.done).toMatchObject({ kind: 'timeout', reason: 'timeout after 0.2 s' });
    const t0 = Date.now();
    const left = launcher.run(opts(['sh', '-c', 'sleep 30 & echo bye']))!;
    const pgid = (await left.started)!;
    expect(await left.done).toEqual({ kind: 'exited', exitCode: 0, signal: null, reason: null });
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(processGroupAlive(pgid)).toBe(false);
    expect((await launcher.run(opts(['no-such-command-xyz']))!.done).reason).toMatch(/^spawn failed: ENOENT/);
    expect(await launcher.run(opts(['sh', '-c', 'exit 127']))!.done).toEqual({ kind: 'exited', exitCode: 127, signal: null, reason: null });
  });

  it('starts the command with no signal ignored or blocked, whatever the launcher ignores', async () => {
    const o = opts(['grep', '-E', '^Sig(Ign|Blk)', '/proc/self/status']);
    expect((await launcher.run(o)!.done).exitCode).toBe(0);
    expect(await read(o.stdoutFile)).toBe('SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n');
  });

  it('a working directory that is gone: C and Python say the command could not start; bash, whose shim exits first, leaves it unknown', async () => {
    const o = { ...opts(['true']), cwd: join(dir, 'no-such-dir') };
    const r = await launcher.run(o)!.done;
    if (name !== 'bash')
      expect(r).toMatchObject({
        kind: 'spawn-failed',
        exitCode: null,
        signal: null,
        reason: expect.stringMatching(/^spawn failed: .*No such file or directory/),
      });
    else expect(r).toEqual({ kind: 'unknown', exitCode: null, signal: null, reason: EXIT_UNKNOWN });
  });

  it('passes any argument through untouched, quotes and newlines included', async () => {
    const weird = ["it's", 'a "b"', '$HOME', '`x`', 'line\nbreak', '', '\\'];
    const o = opts(['printf', '%s|', ...weird]);
    expect((await launcher.run(o)!.done).exitCode).toBe(0);
    expect(await read(o.stdoutFile)).toBe(weird.map((w) => `${w}|`).join(''));
  });

  it('takes a variable whose name is no shell identifier only where it can (bash cannot export it)', async () => {
    const o = opts(['env'], { env: { 'not-a-name': 'x' } });
    const h = launcher.run(o);
    if (name === 'bash') return expect(h).toBeNull();
    expect((await h!.done).exitCode).toBe(0);
    expect(await read(o.stdoutFile)).toMatch(/^not-a-name=x$/m);
  });

  it('a group killed from outside: the C or Python launcher, its parent, records the signal; the bash shim dies with it, unknown', async () => {
    const h = launcher.run(opts(['sleep', '30']))!;
    const pgid = (await h.started)!;
    await new Promise((r) => setTimeout(r, 100));
    execFileSync('kill', ['-KILL', '--', `-${pgid}`]);
    expect(await h.done).toEqual(
      name !== 'bash'
        ? { kind: 'signaled', exitCode: null, signal: 'SIGKILL', reason: null }
        : { kind: 'unknown', exitCode: null, signal: null, reason: EXIT_UNKNOWN },
    );
  });

  it('a launcher killed from outside: its running job is still followed, and ends unknown when no status was written', async () => {
    // The job ends when the test says so, after the kill: a fixed sleep lost the race on a loaded
    // machine (the job had exited and its status was written before the kill arrived). Bounded (about
    // 30 s and more), so that a test failing before the gate leaves no loop behind for long.
    const o = opts(['sh', '-c', 'for i in $(seq 1500); do [ -e gate ] && break; sleep 0.02; done; exit 4']);
    const h = launcher.run(o)!;
    await h.started;
    const proc = launcherProcess();
    execFileSync('kill', ['-KILL', String(proc)]);
    await writeFile(join(dir, 'gate'), '');
    // bash: the shim survives its launcher and writes the status; C and Python: the launcher was the writer.
    expect(await h.done).toEqual(
      name === 'bash' ? { kind: 'exited', exitCode: 4, signal: null, reason: null } : { kind: 'unknown', exitCode: null, signal: null, reason: EXIT_UNKNOWN },
    );
    // The next attempt gets a new launcher.
    expect((await launcher.run(opts(['true']))!.done).exitCode).toBe(0);
  });

  it('a job outlives the launcher, and can be followed by its pid (an agent restarted)', async () => {
    const o = opts(['sh', '-c', 'sleep 0.5; exit 5']);
    const h = launcher.run(o)!;
    const pid = (await h.started)!;
    h.leave();
    launcher.close();
    const attached = attachProcess({ pid, statusFile: o.statusFile, killGraceMs: 500, pollMs: 20 });
    expect(await attached.done).toEqual({ kind: 'exited', exitCode: 5, signal: null, reason: null });
  });
});

/** The pid of this test process's launcher: its child running the program. */
function launcherProcess(): number {
  const out = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' });
  const line = out.split('\n').find((l) => /launcher\.py|gantry-launcher|bash --norc/.test(l));
  if (!line) throw new Error(`no launcher among ${out}`);
  return Number(line.trim().split(/\s+/)[0]);
}

describe('Launcher programs', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gantry-launcher-'));
  });

  it('a program that does not start gives its jobs to the next one, and with none left the command is spawned directly', async () => {
    // /bin/false as "python": exits before it says ready, having read nothing.
    const broken = pythonLauncher('/bin/false');
    launcher = new Launcher(base, (l) => lines.push(l), [broken, bashLauncher]);
    const o = opts(['sh', '-c', 'echo via $0; exit 6']);
    expect(await launcher.run(o)!.done).toEqual({ kind: 'exited', exitCode: 6, signal: null, reason: null });
    expect(launcher.program).toBe('bash');
    expect(lines.join('\n')).toMatch(/launcher \(python\) did not start/);
    launcher.close();
    launcher = new Launcher(base, (l) => lines.push(l), [broken]);
    const d = opts(['sh', '-c', 'exit 7']);
    expect(await launcher.run(d)!.done).toEqual({ kind: 'exited', exitCode: 7, signal: null, reason: null });
    expect(await read(d.statusFile)).toBe('7\n');
    expect(launcher.program).toBeNull();
    expect(launcher.run(opts(['true']))).toBeNull();
  });

  it('GANTRY_AGENT_LAUNCHER chooses, and says what it accepts', () => {
    const names = (v: string | undefined) => launcherPrograms({ PATH: base.PATH, GANTRY_AGENT_LAUNCHER: v }).map((p) => p.name);
    expect(names('bash')).toEqual(['bash']);
    expect(names('none')).toEqual([]);
    expect(names('0')).toEqual([]);
    expect(names(undefined)).toEqual([...(compiled ? ['c'] : []), ...(python ? ['python'] : []), 'bash']);
    // No binary (no compiler when it was built): Python first, as before.
    const without = launcherPrograms({ PATH: base.PATH }, join(dir, 'no-gantry-launcher')).map((p) => p.name);
    expect(without).toEqual([...(python ? ['python'] : []), 'bash']);
    expect(launcherPrograms({ PATH: base.PATH, GANTRY_AGENT_LAUNCHER: 'c' }, join(dir, 'no-gantry-launcher'))).toEqual([]);
    expect(launcherPrograms({ PATH: '/nonexistent', GANTRY_AGENT_LAUNCHER: 'python' })).toEqual([]);
    expect(() => names('pyhton')).toThrow(/GANTRY_AGENT_LAUNCHER must be auto, c, python, bash or none, not "pyhton"/);
  });
});

describe.skipIf(!compiled)('the C launcher', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gantry-launcher-'));
  });

  it('answers a malformed job with fail (or a line on stderr when it has no id) and goes on with the next', async () => {
    const proc = spawn(LAUNCHER_C, [], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (err += d));
    const files = [join(dir, 'o'), join(dir, 'e'), join(dir, 's')];
    const job = (id: string, ...rest: string[]) => [id, dir, ...files, '', '', ...rest].join('\t') + '\n';
    const bad: [string, RegExp][] = [
      ['1\tonly two\n', /too few fields/],
      [job('2', '5', 'x', '1', 'true', '0'), /a bad count of cgroups/],
      [job('3', '0', '9', 'true', '0'), /a bad count of arguments/],
      [job('4', '0', '1', 'true', '3', 'A', 'b'), /a bad count of variables/],
      [job('5', '0', '1', 'true', '0', 'extra'), /fields left over/],
      [job('6', '0', '1', 'tr\\ue', '0'), /an unknown escape/],
      [job('7', '0', '1', 'tr\\0ue', '0'), /a NUL byte/],
      [job('8', '0', '0', '0'), /no command/],
      [job('9', '0', '1', 'true', '1', 'A=B', 'c'), /a variable name that is empty or holds '='/],
      [[9.5, dir, ...files, 'root', '0', '0', '1', 'true', '0'].join('\t') + '\n', /a uid or gid that is no number/],
      [`10\t${'x'.repeat(65 << 20)}\n`, /a line over \d+ bytes/],
    ];
    for (const [line] of bad) proc.stdin.write(line);
    proc.stdin.write('no id here\\\n');
    proc.stdin.write(job('11', '0', '3', '/bin/sh', '-c', 'exit 3', '0'));
    proc.stdin.end();
    const code = await new Promise((r) => proc.once('exit', r));
    expect(code, err).toBe(0);
    const lines = out.trim().split('\n');
    expect(lines[0]).toBe('ready');
    for (const [line, why] of bad) {
      const id = line.split('\t')[0]!;
      expect(lines.find((l) => l.startsWith(`fail ${id} malformed job:`)) ?? lines, line.slice(0, 80)).toMatch(why);
    }
    expect(err).toMatch(/a job line without a readable id/);
    expect(lines.slice(-2)).toEqual([expect.stringMatching(/^pid 11 \d+$/), 'end 11 3']);
    expect(await read(files[2]!)).toBe('3\n');
  });

  it('judges a line over the limit whole when it arrives with its newline in one read (a file as its input)', async () => {
    // A file, unlike a pipe, gives the launcher as much as its buffer takes at each read: the line
    // and its newline in the read that crossed the limit (the CI's 'too few fields' for such a line).
    const input = join(dir, 'jobs');
    const files = [join(dir, 'o'), join(dir, 'e'), join(dir, 's')];
    await writeFile(input, `10\t${'x'.repeat(65 << 20)}\n` + ['11', dir, ...files, '', '', '0', '3', '/bin/sh', '-c', 'exit 3', '0'].join('\t') + '\n');
    const fd = openSync(input, 'r');
    const proc = spawn(LAUNCHER_C, [], { stdio: [fd, 'pipe', 'pipe'] });
    closeSync(fd);
    let out = '';
    proc.stdout!.on('data', (d) => (out += d));
    expect(await new Promise((r) => proc.once('exit', r))).toBe(0);
    const lines = out.trim().split('\n');
    expect(lines.find((l) => l.startsWith('fail 10 '))).toMatch(/^fail 10 malformed job: a line over \d+ bytes$/);
    expect(lines.slice(-2)).toEqual([expect.stringMatching(/^pid 11 \d+$/), 'end 11 3']);
  });

  /** The C launcher on pipes, its answers collected, waited for line by line. */
  function cLauncherProcess() {
    const proc = spawn(LAUNCHER_C, [], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout.on('data', (d) => (out += d));
    const answer = async (re: RegExp) => {
      expect(await until(() => out.split('\n').some((l) => re.test(l))), `${re} in ${out}`).toBe(true);
      return out.split('\n').find((l) => re.test(l))!;
    };
    const exited = new Promise<number | null>((r) => proc.once('exit', r));
    return { proc, answer, exited, out: () => out };
  }
  const jobLine = (id: string, procs: string[], command: string) =>
    [
      id,
      dir,
      join(dir, `${id}.out`),
      join(dir, `${id}.err`),
      join(dir, `${id}.status`),
      '',
      '',
      String(procs.length),
      ...procs,
      '3',
      '/bin/sh',
      '-c',
      command,
      '0',
    ].join('\t');
  const alive = (pid: number) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };

  it('prepares a child that joins its cgroups before any job, and runs the job sent into it there (pid, end, status)', async () => {
    const procs = [join(dir, 'v2.procs'), join(dir, 'memory.procs')];
    for (const f of procs) await writeFile(f, '');
    const l = cLauncherProcess();
    l.proc.stdin.write(`prepare\tp1\t2\t${procs.join('\t')}\n`);
    const child = Number((await l.answer(/^prepared p1 \d+$/)).split(' ')[2]);
    // Joined (the fake cgroup.procs files hold its "0"), and waiting: no job yet.
    expect(await until(() => procs.every((f) => readSoFar(f) === '0'))).toBe(true);
    expect(alive(child)).toBe(true);
    for (const f of procs) await writeFile(f, '');
    l.proc.stdin.write(`job-in\tp1\t${jobLine('7', procs, 'echo "$$ $GREETING"; exit 3')}\n`);
    expect(await l.answer(/^pid 7 /)).toBe(`pid 7 ${child}`);
    expect(await l.answer(/^end 7 /)).toBe('end 7 3');
    // The command is the prepared child, exec'd: it joined nothing again.
    expect(await read(join(dir, '7.out'))).toBe(`${child} \n`);
    expect(await read(join(dir, '7.status'))).toBe('3\n');
    expect(procs.map(readSoFar)).toEqual(['', '']);
    l.proc.stdin.end();
    expect(await l.exited).toBe(0);
  });

  it('does not wait for a prepared child still joining: kills it and starts the job plainly', async () => {
    // The child's join blocks (a FIFO nobody reads stands for a cgroup.procs whose write waits for the lock).
    const fifo = join(dir, 'slow.procs');
    execFileSync('mkfifo', [fifo]);
    const procs = [join(dir, 'v2.procs')];
    await writeFile(procs[0]!, '');
    const l = cLauncherProcess();
    l.proc.stdin.write(`prepare\tp1\t1\t${fifo}\n`);
    const child = Number((await l.answer(/^prepared p1 /)).split(' ')[2]);
    l.proc.stdin.write(`job-in\tp1\t${jobLine('11', procs, 'exit 6')}\n`);
    expect(Number((await l.answer(/^pid 11 /)).split(' ')[2])).not.toBe(child);
    expect(await l.answer(/^end 11 /)).toBe('end 11 6');
    expect(readSoFar(procs[0]!)).toBe('0');
    expect(await until(() => !alive(child))).toBe(true);
    l.proc.stdin.end();
    expect(await l.exited).toBe(0);
  });

  it('ends every prepared child when its stdin closes, and exits once they are gone', async () => {
    const l = cLauncherProcess();
    l.proc.stdin.write('prepare\tp1\t0\nprepare\tp2\t0\n');
    const pids = [Number((await l.answer(/^prepared p1 /)).split(' ')[2]), Number((await l.answer(/^prepared p2 /)).split(' ')[2])];
    expect(pids.every(alive)).toBe(true);
    l.proc.stdin.end();
    expect(await l.exited).toBe(0);
    expect(pids.some(alive)).toBe(false);
  });

  it('a prepared child killed, a token it never had, a child whose join failed: the job starts as a plain one (pid or gone), never a failed start', async () => {
    const procs = [join(dir, 'v2.procs')];
    await writeFile(procs[0]!, '');
    const l = cLauncherProcess();
    l.proc.stdin.write(`prepare\tp1\t1\t${procs[0]}\n`);
    const child = Number((await l.answer(/^prepared p1 /)).split(' ')[2]);
    expect(await until(() => readSoFar(procs[0]!) === '0')).toBe(true);
    process.kill(child, 'SIGKILL');
    expect(await until(() => !alive(child))).toBe(true);
    await writeFile(procs[0]!, '');
    l.proc.stdin.write(`job-in\tp1\t${jobLine('8', procs, 'exit 4')}\n`);
    const started = Number((await l.answer(/^pid 8 /)).split(' ')[2]);
    expect(started).not.toBe(child);
    expect(await l.answer(/^end 8 /)).toBe('end 8 4');
    // A plain start joins, as every start did before.
    expect(readSoFar(procs[0]!)).toBe('0');
    l.proc.stdin.write(`job-in\tnever\t${jobLine('9', procs, 'exit 5')}\n`);
    expect(await l.answer(/^end 9 /)).toBe('end 9 5');
    // Its cgroup removed before it joined: the plain start finds it gone too, and says so.
    const gone = join(dir, 'gone', 'cgroup.procs');
    l.proc.stdin.write(`prepare\tp2\t1\t${gone}\n`);
    await l.answer(/^prepared p2 /);
    l.proc.stdin.write(`job-in\tp2\t${jobLine('10', [gone], 'exit 0')}\n`);
    expect(await l.answer(/^(gone|fail|pid) 10 /)).toMatch(/^gone 10 a cgroup it was to join was removed/);
    l.proc.stdin.end();
    expect(await l.exited).toBe(0);
  });

  it('takes an argv and an environment far larger than any buffer of its own, and says so when the kernel refuses one', async () => {
    launcher = new Launcher(base, (l) => lines.push(l), [compiled!]);
    const args = Array.from({ length: 50_000 }, (_, i) => `arg-${i}\twith\nbreaks\\`);
    const o = opts(['sh', '-c', 'printf "%s|" "$@" | wc -c; printf %s "$BIG" | wc -c', 'sh', ...args], { env: { BIG: 'v'.repeat(100_000) } });
    expect(await launcher.run(o)!.done).toEqual({ kind: 'exited', exitCode: 0, signal: null, reason: null });
    const bytes = args.reduce((n, a) => n + Buffer.byteLength(a) + 1, 0);
    expect((await read(o.stdoutFile)).split('\n').map((l) => l.trim())).toEqual([String(bytes), '100000', '']);
    // One argument over the kernel's limit on a single string (MAX_ARG_STRLEN, 128 KiB): the exec fails, the start is spawn-failed.
    const r = await launcher.run(opts(['echo', 'y'.repeat(200_000)]))!.done;
    expect(r).toMatchObject({ kind: 'spawn-failed', reason: expect.stringMatching(/^spawn failed: Argument list too long/) });
    expect((await launcher.run(opts(['true']))!.done).exitCode).toBe(0);
  });
});

import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { compileLauncher, launcherSourceHash, launcherVersion } from './compile-launcher.js';
import { hostLauncher, LAUNCHER_SOURCE, sweepTemporaryBuilds } from './host-launcher.js';
import { launcherPrograms } from './launcher-programs.js';

const cc = process.env.CC || 'cc';
const hasCompiler = !spawnSync(cc, ['--version'], { stdio: 'ignore' }).error;
if (!hasCompiler) console.warn(`host-launcher.test.ts: no C compiler (${cc}): building the launcher where it runs is not tested here`);
const hash = launcherSourceHash(readFileSync(LAUNCHER_SOURCE));

let dir: string;
let lines: string[];
let made: string[];
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-host-launcher-'));
  lines = [];
  made = [];
});
afterEach(() => rm(dir, { recursive: true, force: true }));

const log = (l: string) => lines.push(l);
const madeTemporary = (d: string) => made.push(d);
const cacheDir = () => join(dir, 'data', 'launcher');
const own = () => join(cacheDir(), `gantry-launcher-${process.platform}-${process.arch}-${hash}`);
/** A file marked executable, where the prebuilt binary would be. */
const executable = (name: string, content: string | Buffer) => {
  const file = join(dir, name);
  writeFileSync(file, content);
  chmodSync(file, 0o755);
  return file;
};

/** The first 64 bytes of an ELF64 executable for another machine than this one: AArch64 here on x86-64, x86-64 elsewhere. */
function foreignElf(): Buffer {
  const h = Buffer.alloc(64);
  h.write('\x7fELF', 0, 'latin1');
  h[4] = 2; // 64-bit
  h[5] = 1; // little-endian
  h[6] = 1; // version
  h.writeUInt16LE(2, 16); // an executable
  h.writeUInt16LE(process.arch === 'x64' ? 0xb7 : 0x3e, 18); // e_machine
  h.writeUInt32LE(1, 20);
  h.writeUInt16LE(64, 52); // its header's size
  return h;
}

describe.skipIf(!hasCompiler)('hostLauncher: the C launcher built for the host it runs on', () => {
  it('takes a prebuilt binary of this source that runs here as it is, and says nothing', () => {
    const prebuilt = join(dir, 'gantry-launcher');
    expect(compileLauncher({ source: LAUNCHER_SOURCE, out: prebuilt, cc, flags: ['-O2'] })).toEqual({ kind: 'built' });
    expect(launcherVersion(prebuilt)).toEqual({ kind: 'runs', source: hash });
    expect(hostLauncher({ prebuilt, cacheDir: cacheDir(), log })).toBe(prebuilt);
    expect(lines).toEqual([]);
    expect(existsSync(cacheDir())).toBe(false);
  });

  it.each([
    ['a file of garbage marked executable', () => executable('gantry-launcher', Buffer.from('\x00\x01garbage\xff\xfe'.repeat(20), 'latin1'))],
    ["another architecture's ELF", () => executable('gantry-launcher', foreignElf())],
  ])('passes over %s: builds one for this host in the data directory, uses it, and says why in one line', (_, make) => {
    const prebuilt = make();
    const file = hostLauncher({ prebuilt, cacheDir: cacheDir(), log });
    expect(file).toBe(own());
    expect(launcherVersion(own())).toEqual({ kind: 'runs', source: hash });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`${prebuilt} cannot be used: it ended with status`);
    expect(lines[0]).toContain(`built for this host (${process.platform}-${process.arch}) into ${own()}`);
    // Which the agent starts: the C launcher, from the binary built here.
    expect(launcherPrograms({ PATH: process.env.PATH ?? '', GANTRY_AGENT_LAUNCHER: 'c' }, file).map((p) => p.argv[0])).toEqual([own()]);
  });

  it("rebuilds a stale binary (built from an older launcher.c), says so, and removes the data directory's stale build", () => {
    const older = join(dir, 'older-launcher.c');
    writeFileSync(older, readFileSync(LAUNCHER_SOURCE, 'utf8') + '\n/* an older version */\n');
    const prebuilt = join(dir, 'gantry-launcher');
    compileLauncher({ source: older, out: prebuilt, cc, flags: ['-O2'] });
    const olderHash = launcherSourceHash(readFileSync(older));
    // The agent's own build of that older source, made by an earlier version of the agent.
    const stale = join(cacheDir(), `gantry-launcher-${process.platform}-${process.arch}-${olderHash}`);
    expect(hostLauncher({ prebuilt: join(dir, 'none'), cacheDir: cacheDir(), log, source: older })).toBe(stale);
    lines.length = 0;

    expect(hostLauncher({ prebuilt, cacheDir: cacheDir(), log })).toBe(own());
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`${prebuilt} was built from another launcher.c (${olderHash}; this agent's is ${hash})`);
    expect(readdirSync(cacheDir())).toEqual([`gantry-launcher-${process.platform}-${process.arch}-${hash}`]);
  });

  it('uses its own build on the next start without building again; a build there that does not run is built anew', () => {
    const none = join(dir, 'no-prebuilt');
    expect(hostLauncher({ prebuilt: none, cacheDir: cacheDir(), log })).toBe(own());
    expect(lines).toHaveLength(1);
    const built = statSync(own()).mtimeMs;
    lines.length = 0;
    expect(hostLauncher({ prebuilt: none, cacheDir: cacheDir(), log })).toBe(own());
    expect(lines).toEqual([]);
    expect(statSync(own()).mtimeMs).toBe(built);

    writeFileSync(own(), 'garbage\n');
    expect(hostLauncher({ prebuilt: none, cacheDir: cacheDir(), log })).toBe(own());
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`${own()} cannot be used`);
    expect(launcherVersion(own())).toEqual({ kind: 'runs', source: hash });
  });

  it('a data directory another user could change keeps no binary to run: one planted there is never started; this start builds its own elsewhere', () => {
    mkdirSync(cacheDir(), { recursive: true });
    // The agent started in a directory others can write: they could rename the data directory and plant this.
    chmodSync(join(dir, 'data'), 0o777);
    const ran = join(dir, 'planted-ran');
    writeFileSync(own(), `#!/bin/sh\ntouch ${ran}\necho "gantry-launcher ${hash}"\n`);
    chmodSync(own(), 0o755);
    const got = hostLauncher({ prebuilt: join(dir, 'no-prebuilt'), cacheDir: cacheDir(), log, madeTemporary });
    expect(existsSync(ran)).toBe(false);
    expect(got).not.toBeNull();
    expect(got!.startsWith(cacheDir())).toBe(false);
    expect(launcherVersion(got!)).toEqual({ kind: 'runs', source: hash });
    expect(existsSync(ran)).toBe(false);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`${cacheDir()} is not used to keep it: ${join(dir, 'data')} is writable by its group (mode 777)`);
    // The agent is told of the private directory, to remove it when it stops; the directory names its owner, this process.
    expect(made).toEqual([join(got!, '..')]);
    expect(readFileSync(join(got!, '..', 'owner'), 'utf8')).toMatch(new RegExp(`^${process.pid} \\d+$`));
    rmSync(join(got!, '..'), { recursive: true, force: true });
  });

  it('a private directory that ended up holding no build is removed at once, and the agent is told of none', () => {
    mkdirSync(cacheDir(), { recursive: true });
    chmodSync(join(dir, 'data'), 0o777);
    const got = hostLauncher({ prebuilt: join(dir, 'no-prebuilt'), cacheDir: cacheDir(), cc: join(dir, 'no-such-cc'), log, madeTemporary });
    expect(got).toBeNull();
    expect(made).toEqual([]);
    const tmp = /built into (\S+) for this start/.exec(lines.join('\n'))?.[1];
    expect(tmp).toBeDefined();
    expect(existsSync(tmp!)).toBe(false);
  });
});

describe('sweepTemporaryBuilds: what agents that did not stop left in the temporary directory', () => {
  it("removes this user's old private build directories that nothing runs from, and nothing else", async () => {
    const tmp = join(dir, 'tmp');
    const old = (Date.now() - 11 * 60_000) / 1000;
    const make = (name: string, age: number | null) => {
      mkdirSync(join(tmp, name), { recursive: true });
      writeFileSync(join(tmp, name, 'gantry-launcher-x'), '');
      if (age !== null) utimesSync(join(tmp, name), age, age);
      return join(tmp, name);
    };
    const left = make('gantry-launcher-AbC123', old);
    const young = make('gantry-launcher-Young1', null);
    const other = make('gantry-host-Abc123', old);
    // A live agent's launcher: a process whose executable is in its directory.
    const live = make('gantry-launcher-Live01', old);
    copyFileSync('/bin/sleep', join(live, 'gantry-launcher-x'));
    chmodSync(join(live, 'gantry-launcher-x'), 0o755);
    utimesSync(live, old, old);
    // An idle agent's (no launcher running): its owner, this process, is alive. A dead owner's goes.
    const idle = make('gantry-launcher-Idle01', null);
    writeFileSync(join(idle, 'owner'), `${process.pid} ${readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ')[19]}`);
    utimesSync(idle, old, old);
    const dead = make('gantry-launcher-Dead01', null);
    writeFileSync(join(dead, 'owner'), `${process.pid} 1`);
    utimesSync(dead, old, old);
    const child = spawn(join(live, 'gantry-launcher-x'), ['30'], { stdio: 'ignore' });
    try {
      await new Promise((r) => child.once('spawn', r));
      sweepTemporaryBuilds(tmp);
      expect(existsSync(left)).toBe(false);
      expect(existsSync(young)).toBe(true);
      expect(existsSync(other)).toBe(true);
      expect(existsSync(live)).toBe(true);
      expect(existsSync(idle)).toBe(true);
      expect(existsSync(dead)).toBe(false);
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe('hostLauncher: no C launcher to be had', () => {
  it('no compiler and no binary that runs: null, said once with what it costs', () => {
    const prebuilt = executable('gantry-launcher', 'garbage\n');
    expect(hostLauncher({ prebuilt, cacheDir: cacheDir(), log, cc: join(dir, 'no-such-cc') })).toBeNull();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`${prebuilt} cannot be used`);
    expect(lines[0]).toContain(`no C compiler (${join(dir, 'no-such-cc')}: `);
    expect(lines[0]).toMatch(/stages start with the Python launcher instead where python3 is \(else bash\): about 0\.8 ms more of the machine's CPU a stage/);
    expect(readdirSync(cacheDir())).toEqual([]);
    // The agent then starts stages with the next launcher.
    const names = launcherPrograms({ PATH: process.env.PATH ?? '' }, null).map((p) => p.name);
    expect(names[0]).not.toBe('c');
  });

  it('a compiler that refuses the source: its first error line, and nothing left behind', () => {
    const failing = executable(
      'cc',
      "#!/bin/sh\necho 'In file included from launcher.c:1:' >&2\necho 'launcher.c:40:10: fatal error: poll.h: No such file or directory' >&2\nexit 1\n",
    );
    expect(hostLauncher({ prebuilt: join(dir, 'none'), cacheDir: cacheDir(), log, cc: failing })).toBeNull();
    expect(lines).toEqual([
      expect.stringContaining(`it could not be built for this host: ${failing} says "launcher.c:40:10: fatal error: poll.h: No such file or directory"`),
    ]);
    expect(readdirSync(cacheDir())).toEqual([]);
  });

  it('the C launcher is looked for only where it is wanted', () => {
    const programs = launcherPrograms({ PATH: process.env.PATH ?? '', GANTRY_AGENT_LAUNCHER: 'bash' }, () => {
      throw new Error('looked for');
    });
    expect(programs.map((p) => p.name)).toEqual(['bash']);
  });
});

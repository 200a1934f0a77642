/**
 * The sandbox for real: bubblewrap run as an unprivileged uid through setpriv, as the launcher runs
 * it (it joins the attempt's cgroups, drops to the attempt's user, then execs the wrap and the
 * command). Needs root (to become that uid) and bubblewrap; skipped, saying why, without them.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processGroupAlive } from '../attempt/process-group.js';
import { fromStatus, runProcess } from '../attempt/process-runner.js';
import { findSandbox } from './find-sandbox.js';
import { sandboxArgv, type SandboxAttempt, type SandboxTool } from './sandbox-argv.js';

/** The first uid of the default --uid-range: not in /etc/passwd, owns nothing of the host's. */
const UID = 61184;
const SETPRIV = ['setpriv', `--reuid=${UID}`, `--regid=${UID}`, '--clear-groups', '--no-new-privs'];

function cannotRun(): string | null {
  if (process.getuid?.() !== 0) return 'needs root, to run bwrap as uid 61184 through setpriv';
  if (!existsSync('/usr/bin/bwrap')) return 'bubblewrap is not installed (apt install bubblewrap)';
  if (!['/usr/bin/setpriv', '/bin/setpriv'].some((p) => existsSync(p))) return 'setpriv (util-linux) is not installed';
  return null;
}
const why = cannotRun();
if (why) console.warn(`sandbox.test.ts skipped: ${why}`);
const title = (t: string) => (why ? `${t} (skipped: ${why})` : t);

/** What bwrap's --dev puts in /dev, besides the device files the attempt is given. */
const BWRAP_DEV = ['core', 'fd', 'full', 'null', 'ptmx', 'pts', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'tty', 'urandom', 'zero'];

describe.skipIf(!!why)(title('the sandbox, run as uid 61184'), () => {
  let base = '';
  let tool: SandboxTool;
  let attempt: SandboxAttempt;
  /** A file of the host's /tmp, which the sandbox's /tmp must not show. */
  let hostTmpFile = '';
  /** A Unix socket under /run that anyone may connect to, as PostgreSQL's is. */
  let runSocket = '';
  let server: Server | null = null;

  beforeAll(async () => {
    const found = findSandbox({ user: { uid: UID, gid: UID } });
    if ('problem' in found) throw new Error(`bwrap is installed but does not work here: ${found.problem}`);
    tool = found;
    // Not under /tmp, which the sandbox replaces (as an agent's data directory is not, usually:
    // under /tmp its attempts' /tmp would hold the directories on the way to their own).
    base = mkdtempSync('/var/tmp/gantry-sandbox-');
    chmodSync(base, 0o711); // the uid passes through to its own directories, as under the agent's data dir
    const dir = join(base, 'attempt');
    mkdirSync(dir, { mode: 0o711 });
    for (const d of ['attempt/work', 'attempt/output', 'attempt/input', 'checkpoint', 'elsewhere']) ownDir(join(base, d));
    // Device files as the host has them: major 195 for NVIDIA's, made here because this host has no GPU.
    const dev = join(base, 'dev');
    mkdirSync(join(dev, 'nvidia-caps'), { recursive: true });
    mkdirSync(join(dev, 'infiniband'));
    for (const [name, major, minor] of [
      ['nvidia0', 195, 0],
      ['nvidia1', 195, 1],
      ['nvidia2', 195, 2],
      ['nvidiactl', 195, 255],
      ['nvidia-uvm', 508, 0],
      ['nvidia-caps/nvidia-cap1', 511, 1],
      ['nvidia-caps/nvidia-cap2', 511, 2],
      ['infiniband/uverbs0', 231, 192],
    ] as const) {
      const r = spawnSync('mknod', [join(dev, name), 'c', String(major), String(minor)], { encoding: 'utf8' });
      if (r.status !== 0) throw new Error(`mknod ${name}: ${r.stderr}`);
    }
    // The agent's to create, owned by the attempt's user, in the attempt's directory, which is the agent's.
    writeFileSync(join(dir, 'progress.jsonl'), '');
    chownSync(join(dir, 'progress.jsonl'), UID, UID);
    attempt = {
      tool,
      gpuIndices: [1],
      // As for a MIG device of GPU 1 whose capability files are cap1 (and another's, cap2, is not its).
      nvidiaCaps: [1],
      dirs: {
        work: join(dir, 'work'),
        output: join(dir, 'output'),
        input: join(dir, 'input'),
        checkpoint: join(base, 'checkpoint'),
        progressFile: join(dir, 'progress.jsonl'),
      },
      network: false,
      devDir: dev,
    };
    hostTmpFile = join(tmpdir(), `gantry-sandbox-host-${process.pid}`);
    writeFileSync(hostTmpFile, 'the host\n');
    runSocket = `/run/gantry-sandbox-${process.pid}.sock`;
    server = createServer((c) => c.end());
    await new Promise<void>((resolve, reject) => server!.once('error', reject).listen(runSocket, resolve));
    chmodSync(runSocket, 0o777);
  });

  afterAll(async () => {
    if (server) await new Promise((resolve) => server!.close(resolve));
    for (const p of [hostTmpFile, runSocket, base]) if (p) rmSync(p, { recursive: true, force: true });
  });

  function ownDir(p: string): void {
    mkdirSync(p, { mode: 0o700 });
    chownSync(p, UID, UID);
  }

  /** `sh -c script` in the attempt's sandbox, as the launcher starts it. */
  function sandboxed(script: string, over: Partial<SandboxAttempt> = {}) {
    const argv = [...SETPRIV, ...sandboxArgv({ ...attempt, ...over }), '/bin/sh', '-c', script];
    const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: 20_000 });
    if (r.error) throw r.error;
    return r;
  }

  it('is found working by findSandbox, probed as uid 61184', () => {
    expect(findSandbox({ user: { uid: UID, gid: UID } })).toEqual({ bwrap: '/usr/bin/bwrap', disableUserns: expect.any(Boolean) as boolean });
  });

  it('has the host read-only: neither /usr nor a directory the uid owns outside its own can be written', () => {
    const elsewhere = join(base, 'elsewhere');
    // Outside the sandbox the uid can write there: only the sandbox stops it.
    expect(spawnSync(SETPRIV[0]!, [...SETPRIV.slice(1), 'touch', join(elsewhere, 'outside')]).status).toBe(0);
    const r = sandboxed(`touch /usr/gantry-x; touch ${elsewhere}/inside`);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/touch: cannot touch '\/usr\/gantry-x': Read-only file system/);
    expect(r.stderr).toContain(`cannot touch '${elsewhere}/inside': Read-only file system`);
    expect(existsSync('/usr/gantry-x')).toBe(false);
    expect(existsSync(join(elsewhere, 'inside'))).toBe(false);
  });

  it('gives it a /tmp of its own, empty, that the host does not see, and a /dev/shm it can write', () => {
    const r = sandboxed(`ls -A /tmp; test -e ${hostTmpFile} && echo host-file-seen; echo x > /tmp/mine && echo x > /dev/shm/mine && echo wrote`);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('wrote\n');
    expect(existsSync(join(tmpdir(), 'mine'))).toBe(false);
  });

  it('writes its own directories: work (its cwd), output, input, checkpoint, the progress file', () => {
    const { work, output, input, checkpoint, progressFile } = attempt.dirs;
    const r = sandboxed(`pwd; touch ./w ${output}/o ${input}/i ${checkpoint}/c && echo '{"step":1}' >> ${progressFile} && id -u`);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(`${work}\n${UID}\n`);
    for (const f of [join(work, 'w'), join(output, 'o'), join(input, 'i'), join(checkpoint!, 'c'), progressFile!]) expect(statSync(f).uid).toBe(UID);
  });

  it('works in directories reached through a symbolic link, as a data directory on /data -> /mnt/nvme0 is', () => {
    const link = join(base, 'attempt-link');
    symlinkSync(join(base, 'attempt'), link);
    const dirs = {
      work: join(link, 'work'),
      output: join(link, 'output'),
      input: join(link, 'input'),
      checkpoint: null,
      progressFile: join(link, 'progress.jsonl'),
    };
    const r = sandboxed(`pwd; touch ./via-link ${dirs.output}/via-link && echo wrote`, { dirs });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(`${dirs.work}\nwrote\n`);
    expect(statSync(join(base, 'attempt/work/via-link')).uid).toBe(UID);
    expect(statSync(join(base, 'attempt/output/via-link')).uid).toBe(UID);
  });

  it('has only lo without the network, which works, and no socket of /run; the host interfaces and /run with network: true', () => {
    const interfaces = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '";
    const loopback = `python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); socket.create_connection(s.getsockname()); print('lo works')"`;
    const unix = `python3 -c "import socket; s = socket.socket(socket.AF_UNIX); s.connect('${runSocket}'); print('socket reached')" 2>/dev/null || echo 'no socket'`;
    const host = readFileSync('/proc/net/dev', 'utf8')
      .split('\n')
      .slice(2)
      .flatMap((l) => (l.includes(':') ? [l.split(':')[0]!.trim()] : []))
      .sort();
    expect(host.length).toBeGreaterThan(1); // else the two cases below would not differ

    const off = sandboxed(`${interfaces}; echo; ${loopback}; ${unix}`);
    expect(off.stderr).toBe('');
    expect(off.stdout).toBe('lo \nlo works\nno socket\n');

    const on = sandboxed(`${interfaces}; echo; ${unix}`, { network: true });
    expect(on.stderr).toBe('');
    expect(on.stdout).toBe(`${host.join(' ')} \nsocket reached\n`);
  });

  it("has in /dev its own GPU, its own MIG capability file and the NVIDIA control files, not the other GPUs' nor other capability files; RDMA devices only with the network", () => {
    const list =
      'ls -A /dev | tr "\\n" " "; echo; ls /dev/nvidia-caps; stat -c "%n %F %t:%T" /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-caps/nvidia-cap1';
    const r = sandboxed(list);
    expect(r.stderr).toBe('');
    const [entries, ...stats] = r.stdout.trim().split('\n');
    expect(entries!.trim().split(' ').sort()).toEqual([...BWRAP_DEV, 'nvidia-caps', 'nvidia-uvm', 'nvidia1', 'nvidiactl'].sort());
    expect(stats).toEqual([
      'nvidia-cap1',
      '/dev/nvidia1 character special file c3:1',
      '/dev/nvidiactl character special file c3:ff',
      '/dev/nvidia-uvm character special file 1fc:0',
      '/dev/nvidia-caps/nvidia-cap1 character special file 1ff:1',
    ]);

    const two = sandboxed('ls -A /dev | grep -E "^(nvidia[0-9]|infiniband)" | tr "\\n" " "; ls /dev/infiniband', { gpuIndices: [0, 2], network: true });
    expect(two.stderr).toBe('');
    expect(two.stdout).toBe('infiniband nvidia0 nvidia2 uverbs0\n');
  });

  it('sees only its own processes, has its own IPC, and cannot make user namespaces of its own', () => {
    const r = sandboxed(
      'cat /proc/[0-9]*/cmdline | tr "\\0" " "; echo; readlink /proc/self/ns/ipc; unshare -U true 2>/dev/null && echo made-a-user-namespace; true',
    );
    expect(r.stderr).toBe('');
    const [cmdlines, ipc, ...rest] = r.stdout.split('\n');
    expect(cmdlines).toContain('bwrap'); // its pid 1
    expect(cmdlines).not.toContain('vitest');
    expect(ipc).toMatch(/^ipc:\[\d+\]$/);
    expect(ipc).not.toBe(readlinkSync('/proc/self/ns/ipc'));
    expect(rest.join('\n')).toBe(tool.disableUserns ? '' : 'made-a-user-namespace\n');
  });

  it('passes the exit code through, and a signal as 128 + it, which the agent reads as that signal', () => {
    expect(sandboxed('exit 3').status).toBe(3);
    expect(sandboxed('exit 0').status).toBe(0);
    const termed = sandboxed('kill -TERM $$');
    expect(termed.status).toBe(143);
    expect(fromStatus(termed.status!)).toEqual({ exitCode: null, signal: 'SIGTERM' });
    expect(fromStatus(sandboxed('kill -KILL $$').status!)).toEqual({ exitCode: null, signal: 'SIGKILL' });
  });

  describe('stopped as the agent stops an attempt (TERM to its process group, KILL after the grace)', () => {
    /** Started as the agent's own spawn starts it: a shim leading a process group, then setpriv, bwrap, the command. */
    function start(script: string, killGraceMs: number) {
      const dir = join(base, `run-${Math.random().toString(36).slice(2)}`);
      mkdirSync(dir);
      return {
        dir,
        handle: runProcess({
          command: [...SETPRIV, ...sandboxArgv(attempt), '/bin/sh', '-c', script],
          cwd: attempt.dirs.work,
          env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
          stdoutFile: join(dir, 'stdout.log'),
          stderrFile: join(dir, 'stderr.log'),
          statusFile: join(dir, 'status'),
          killGraceMs,
        }),
      };
    }

    async function ready(file: string): Promise<void> {
      for (let i = 0; i < 500 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 10));
      if (!existsSync(file)) throw new Error(`the command never wrote ${file}`);
    }

    it('the TERM reaches the command inside, which has its grace to finish, and the attempt ends as SIGTERM', async () => {
      const work = attempt.dirs.work;
      const { dir, handle } = start(`trap 'echo checkpointed > ${work}/term; exit 0' TERM; touch ${work}/ready-1; while :; do sleep 0.05; done`, 10_000);
      try {
        await ready(join(work, 'ready-1'));
        await handle.kill('stopped by the test');
        const r = await handle.done;
        expect(r).toEqual({ kind: 'killed', exitCode: null, signal: 'SIGTERM', reason: 'killed: stopped by the test' });
        expect(readFileSync(join(work, 'term'), 'utf8')).toBe('checkpointed\n');
        expect(readFileSync(join(dir, 'status'), 'utf8')).toBe('143\n');
        expect(processGroupAlive(handle.pid!)).toBe(false);
      } finally {
        if (handle.pid && processGroupAlive(handle.pid)) process.kill(-handle.pid, 'SIGKILL');
      }
    });

    it('a command that ignores the TERM is killed after the grace, with what it started in the sandbox', async () => {
      const work = attempt.dirs.work;
      const { handle } = start(`trap '' TERM; (trap '' TERM; sleep 300) & touch ${work}/ready-2; while :; do sleep 0.05; done`, 300);
      try {
        await ready(join(work, 'ready-2'));
        await handle.kill('stopped by the test');
        const r = await handle.done;
        expect(r.kind).toBe('killed');
        expect(processGroupAlive(handle.pid!)).toBe(false);
      } finally {
        if (handle.pid && processGroupAlive(handle.pid)) process.kill(-handle.pid, 'SIGKILL');
      }
    });
  });
});

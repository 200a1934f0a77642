/**
 * The programs a Launcher (launcher.ts) can keep to start attempts' commands, and which the agent
 * tries. All speak the same answers on their stdout (`ready`, `pid <id> <pid>`, `end <id>
 * <status>`, and for C and Python `fail <id> <message>`, `gone <id> <message>`); they differ in how
 * a job is written to them.
 *
 * - **c**: launcher.c, compiled for the host it runs on: by `npm run build` (scripts/build-launcher.ts)
 *   into `gantry-launcher` beside this module in a checkout, else by the agent at its start into its
 *   data directory (host-launcher.ts; the package ships the source, not a binary). Launcher.py's
 *   work in a few hundred kilobytes of C: a contained start is a fork of that and a handful of
 *   system calls in the child, not Python's interpreter in the launcher and again in the child
 *   before the exec (docs/agent.md, "The C launcher"). Tried first when a binary of it is had.
 * - **python**: src/agent/attempt/launcher.py, started with the first attempt. It starts each command
 *   with vfork and exec (Python's subprocess) and is the commands' parent, so it writes each one's exit
 *   status itself. The cheapest: measured on the throughput bench, about 1 ms less of the
 *   machine's CPU per stage than bash (bench/results/).
 * - **bash**: a long-lived bash that starts each command as a background job under a subshell
 *   (the shim) that waits for it and writes its status. Two forks per command.
 *
 * Where neither can be had, or a job is one neither can take, the agent spawns the command itself
 * (process-runner.ts): same files, same status, same outcome, at the cost of a fork of the agent.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { resolveArgv } from './process-runner.js';
import { containedArgv } from '../contain/contained-argv.js';
import type { LaunchContainment } from '../contain/launch-containment.js';

/** One attempt's command as a launcher gets it: its environment as what it adds to the launcher's own. */
export interface LauncherJob {
  id: string;
  /** The file first, already found in PATH (resolveArgv). */
  argv: string[];
  cwd: string;
  set: Record<string, string>;
  stdoutFile: string;
  stderrFile: string;
  statusFile: string;
  /** Cgroups, user, sandbox (docs/containment.md); absent: none. */
  contain?: LaunchContainment;
  /** The token of a child the C launcher prepared in its cgroups (`prepare`): the job goes to it. Absent: a plain start. */
  prepared?: string;
}

export interface LauncherProgram {
  readonly name: 'c' | 'python' | 'bash';
  /** What to spawn: the file, then its arguments. */
  readonly argv: readonly string[];
  /** Written once, before the first job. */
  readonly preamble: string;
  /** The job as what to write, or null when this program cannot take it (the agent spawns it itself). */
  encode(job: LauncherJob): string | null;
  /**
   * The line that asks for a child forked and joined to `procsFiles` ahead of its job (a recycled
   * spare's: docs/containment.md, "A child waiting in a spare"); absent: this program has none.
   */
  prepare?(token: string, procsFiles: readonly string[]): string;
}

export const LAUNCHER_PY = fileURLToPath(new URL('./launcher.py', import.meta.url));
/** The compiled launcher of a checkout: dist/agent/attempt/ after `npm run build`; src/agent/attempt/ (gitignored) after the tests' setup built it. The agent checks it runs here before it takes it (host-launcher.ts). */
export const LAUNCHER_C = fileURLToPath(new URL('./gantry-launcher', import.meta.url));

/**
 * The C launcher at `file`. A job is one line of tab-separated fields, each escaped so that it holds
 * no tab and no newline (launcher.c says the order): no JSON to parse in C, and every list preceded
 * by its count, which the launcher checks against what follows.
 */
export function cLauncher(file: string = LAUNCHER_C): LauncherProgram {
  return {
    name: 'c',
    argv: [file],
    preamble: '',
    encode: (j) => {
      const c = j.contain;
      const argv = c ? [...c.wrap, ...j.argv] : j.argv;
      const set = Object.entries(j.set);
      const fields = [
        j.id,
        j.cwd,
        j.stdoutFile,
        j.stderrFile,
        j.statusFile,
        c?.user ? String(c.user.uid) : '',
        c?.user ? String(c.user.gid) : '',
        String(c?.procsFiles.length ?? 0),
        ...(c?.procsFiles ?? []),
        String(argv.length),
        ...argv,
        String(set.length),
        ...set.flat(),
      ];
      // To the child prepared in its cgroups, which joined them already; a token the launcher no longer has is a plain start.
      return (j.prepared !== undefined ? `job-in\t${escapeField(j.prepared)}\t` : '') + fields.map(escapeField).join('\t') + '\n';
    },
    prepare: (token, procsFiles) => ['prepare', token, String(procsFiles.length), ...procsFiles].map(escapeField).join('\t') + '\n',
  };
}

/** A field with no tab or newline left in it: `\\`, `\t`, `\n`, and `\0` for a NUL, which the launcher refuses (no argv or environment can hold one). */
function escapeField(s: string): string {
  return s.replace(/[\\\t\n\0]/g, (ch) => ESCAPES[ch]!);
}
const ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\0': '\\0' };

/** The Python launcher run by `python` (a path): isolated from the user's PYTHON* settings and site packages. */
export function pythonLauncher(python: string): LauncherProgram {
  return {
    name: 'python',
    argv: [python, '-I', '-S', LAUNCHER_PY],
    preamble: '',
    encode: (j) => {
      const c = j.contain;
      // The launcher's forked child joins the cgroups and drops the user itself (launcher.py, confine).
      const contained = c ? { argv: [...c.wrap, ...j.argv], procs: c.procsFiles, uid: c.user?.uid ?? null, gid: c.user?.gid ?? null } : { argv: j.argv };
      return JSON.stringify({ id: j.id, cwd: j.cwd, set: j.set, stdout: j.stdoutFile, stderr: j.stderrFile, status: j.statusFile, ...contained }) + '\n';
    },
  };
}

const BASH = '/bin/bash';
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The bash launcher. With `set -m`, each background job leads a process group of its own, as a
 * spawn with `detached` does. The job, a subshell, is the attempt's shim: its traps run only once
 * the command has ended (bash defers them while it waits for a foreground command), so a TERM to
 * the group reaches the command and the status is still written; fd 3, the pipe back to the
 * agent, is not the command's. Every word is single-quoted, so nothing in it is interpreted.
 */
export const bashLauncher: LauncherProgram = {
  name: 'bash',
  argv: [BASH, '--norc', '--noprofile', '-s'],
  preamble: "set -m; exec 3>&1; printf 'ready\\n'\n",
  encode(j) {
    const exports: string[] = [];
    for (const [k, v] of Object.entries(j.set)) {
      if (!IDENTIFIER.test(k)) return null;
      exports.push(`export ${k}=${q(v)}`);
    }
    let argv: string[];
    try {
      argv = containedArgv(j.argv, j.contain);
    } catch {
      return null; // no setpriv: the agent's own spawn says why
    }
    const command = argv.map(q).join(' ');
    return (
      `( cd ${q(j.cwd)} || exit 126; ${exports.join('; ')}${exports.length ? '; ' : ''}trap : HUP INT TERM; umask 022; ${command} 3>&-; ` +
      `c=$?; umask 077; echo "$c" > ${q(j.statusFile)}; printf 'end %s %s\\n' ${j.id} "$c" >&3 ) </dev/null >>${q(j.stdoutFile)} 2>>${q(j.stderrFile)} &\n` +
      `printf 'pid %s %s\\n' ${j.id} "$!"; disown $!\n`
    );
  },
};

/** One shell word: single-quoted, with each ' written as '\''. */
function q(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * The programs to try, in order, from GANTRY_AGENT_LAUNCHER: `c`, `python`, `bash`, `none` (the
 * agent spawns every command itself; also `0`), or unset / `auto`: the C launcher where its binary
 * was built, Python where python3 is in PATH, then bash where /bin/bash is. A program that does not
 * start (no such Python, one too old) gives way to the next.
 *
 * `compiled`: the C launcher's binary, or a function that finds one (the agent's: hostLauncher,
 * which checks it runs here and builds one where needed), called only where C is wanted; null:
 * none. A path is taken as it is, where it exists (the tests and benches, after the setup built it).
 */
export function launcherPrograms(
  env: Readonly<Record<string, string | undefined>>,
  compiled: string | null | (() => string | null) = LAUNCHER_C,
): LauncherProgram[] {
  const choice = (env.GANTRY_AGENT_LAUNCHER || 'auto').toLowerCase();
  if (choice === 'none' || choice === '0' || choice === 'off') return [];
  if (choice !== 'auto' && choice !== 'c' && choice !== 'python' && choice !== 'bash') {
    throw new Error(`GANTRY_AGENT_LAUNCHER must be auto, c, python, bash or none, not "${env.GANTRY_AGENT_LAUNCHER}"`);
  }
  const python = findPython(env.PATH ?? '');
  const programs: LauncherProgram[] = [];
  if (choice === 'auto' || choice === 'c') {
    const file = typeof compiled === 'function' ? compiled() : compiled;
    if (file !== null && existsSync(file)) programs.push(cLauncher(file));
  }
  if ((choice === 'auto' || choice === 'python') && python) programs.push(pythonLauncher(python));
  if ((choice === 'auto' || choice === 'bash') && existsSync(BASH)) programs.push(bashLauncher);
  return programs;
}

function findPython(pathVar: string): string | null {
  try {
    return resolveArgv({ command: ['python3'], env: { PATH: pathVar }, cwd: '/' })[0]!;
  } catch {
    return null;
  }
}

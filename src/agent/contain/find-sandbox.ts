/**
 * Whether `--sandbox` can work on this host (docs/containment.md, "The sandbox"): bubblewrap in
 * PATH, and a probe that runs it as attempts will run it, with the same namespaces and mounts, as
 * the attempts' user. An installed bwrap is not enough: user namespaces can be switched off by a
 * sysctl, an AppArmor policy or a container's seccomp profile, and only running it tells.
 */
import { spawnSync } from 'node:child_process';
import { accessSync, constants, readFileSync } from 'node:fs';
import { delimiter, isAbsolute, join } from 'node:path';
import { sandboxBase, type SandboxTool } from './sandbox-argv.js';

export interface FindSandboxOptions {
  /**
   * Who attempts run as (the first uid of `--uid-range`, or `--run-as`'s user): the probe runs bwrap
   * as that user, through `setpriv` as the launcher drops to it. Null: as the agent's own user
   * (an agent that is not root, whose attempts run as itself).
   */
  readonly user: { readonly uid: number; readonly gid: number } | null;
  /** Where bwrap and setpriv are looked for; default $PATH. */
  readonly pathVar?: string;
  /** Where the user-namespace sysctls are read when the probe fails; default /proc/sys. */
  readonly procSys?: string;
}

export type FoundSandbox = SandboxTool | { readonly problem: string };

/** A probe that takes longer has hung (a stuck mount, a blocked fork): bwrap plus `true` takes milliseconds. */
const PROBE_TIMEOUT_MS = 10_000;
/** ContainmentReport.problems holds 500 characters a problem; bwrap's message is cut to leave room for the rest. */
const MAX_MESSAGE = 240;

export function findSandbox(opts: FindSandboxOptions): FoundSandbox {
  const pathVar = opts.pathVar ?? process.env.PATH ?? '';
  const bwrap = inPath('bwrap', pathVar);
  if (bwrap === null) return { problem: 'bubblewrap is not installed (no bwrap in PATH): apt install bubblewrap' };
  const tool: SandboxTool = { bwrap, disableUserns: knowsDisableUserns(bwrap) };
  // The probe's sandbox is an attempt's without a directory of its own and without the network,
  // the most that an attempt asks of bwrap.
  let argv = [...sandboxBase(tool, false), '--chdir', '/', '--', 'true'];
  if (opts.user !== null) {
    const setpriv = inPath('setpriv', pathVar);
    if (setpriv === null) return { problem: `setpriv is not installed (util-linux): needed to try bwrap as uid ${opts.user.uid}` };
    argv = [setpriv, `--reuid=${opts.user.uid}`, `--regid=${opts.user.gid}`, '--clear-groups', '--no-new-privs', ...argv];
  }
  const who = opts.user !== null ? `uid ${opts.user.uid}` : "this agent's user";
  const r = spawnSync(argv[0]!, argv.slice(1), { cwd: '/', encoding: 'utf8', timeout: PROBE_TIMEOUT_MS, stdio: ['ignore', 'ignore', 'pipe'] });
  if (r.error) {
    const timedOut = (r.error as NodeJS.ErrnoException).code === 'ETIMEDOUT';
    return { problem: `bwrap (${bwrap}) as ${who}: ${timedOut ? `no answer within ${PROBE_TIMEOUT_MS / 1000} s` : r.error.message}` };
  }
  if (r.status === 0) return tool;
  const said = firstLine(r.stderr) || (r.signal ? `killed by ${r.signal}` : `exit status ${String(r.status)}`);
  const blocked = userNamespacesBlocked(opts.procSys ?? '/proc/sys');
  return { problem: `bwrap (${bwrap}) does not work here as ${who}: ${said}${blocked ? `; user namespaces are off: ${blocked}` : ''}` };
}

/**
 * The sysctl that keeps unprivileged users from making user namespaces, and how to allow them;
 * null when none of them does (then bwrap's own message says why).
 */
export function userNamespacesBlocked(procSys: string): string | null {
  const read = (p: string): string | null => {
    try {
      return readFileSync(join(procSys, p), 'utf8').trim();
    } catch {
      return null;
    }
  };
  if (read('user/max_user_namespaces') === '0') return 'user.max_user_namespaces is 0 (sysctl -w user.max_user_namespaces=15000)';
  // Debian before 11 and kernels with its patch.
  if (read('kernel/unprivileged_userns_clone') === '0') return 'kernel.unprivileged_userns_clone is 0 (sysctl -w kernel.unprivileged_userns_clone=1)';
  // Ubuntu 23.10 and later: only programs whose AppArmor profile allows it.
  if (read('kernel/apparmor_restrict_unprivileged_userns') === '1') {
    return 'kernel.apparmor_restrict_unprivileged_userns is 1 (give bwrap an AppArmor profile with "userns," or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)';
  }
  return null;
}

/** `--disable-userns` came with bubblewrap 0.8.0 (Debian 12, Ubuntu 24.04); older ones refuse it as unknown. */
function knowsDisableUserns(bwrap: string): boolean {
  const r = spawnSync(bwrap, ['--version'], { encoding: 'utf8', timeout: PROBE_TIMEOUT_MS });
  const m = /(\d+)\.(\d+)/.exec(r.stdout ?? '');
  if (!m) return false;
  const [major, minor] = [Number(m[1]), Number(m[2])];
  return major > 0 || minor >= 8;
}

function inPath(name: string, pathVar: string): string | null {
  for (const dir of pathVar.split(delimiter)) {
    if (!isAbsolute(dir)) continue; // a relative entry would depend on the agent's working directory
    const p = join(dir, name);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return null;
}

function firstLine(text: string | null): string {
  const line = (text ?? '').split('\n').find((l) => l.trim() !== '') ?? '';
  return line.length > MAX_MESSAGE ? `${line.slice(0, MAX_MESSAGE)}…` : line.trim();
}

/**
 * The C launcher binary the agent uses on this host, built here when none at hand was built for it
 * (docs/agent.md, "The C launcher", *Built where it runs*).
 *
 * Why: a binary is for one architecture and libc. The package ships launcher.c, not the binary
 * `npm pack` would have compiled on the packing machine: on a host of another kind that one fails
 * to start (the agent then went on with Python, silently slower) or, worse, starts and misbehaves.
 * So the agent, at its start, asks each candidate which source it was built from (`--version`,
 * compile-launcher.ts), in order:
 *
 * 1. `gantry-launcher` beside this module: what `npm run build` or the tests' setup compiled on this
 *    machine (a checkout; the package does not ship it);
 * 2. its own build in the data directory, `launcher/gantry-launcher-<platform>-<arch>-<hash>`;
 * 3. else it compiles one there with `cc` ($CC), about a second once per host and source.
 *
 * A candidate that does not start here, answers no version, or answers another source's hash is
 * passed over and the log says why; where none can be had (no compiler, the compiler refused) the
 * agent says so in one line, with what it costs, and stages start with the next launcher.
 */
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { compileLauncher, launcherSourceHash, launcherVersion } from './compile-launcher.js';
import { errorText } from '../../lib/error-text.js';
import { procPids } from './proc-pids.js';
import { othersCanChange } from './others-can-change.js';

/** launcher.c beside this module: src/agent/attempt/, or dist/agent/attempt/ where the build copies it. */
export const LAUNCHER_SOURCE = fileURLToPath(new URL('./launcher.c', import.meta.url));

/** What the next launcher costs, for the one line that says the C one is not used (docs/throughput.md: launcher 0.14 ms a stage in C, about 0.9 in Python). */
const FALLBACK =
  'stages start with the Python launcher instead where python3 is (else bash): about 0.8 ms more of the machine\'s CPU a stage (docs/agent.md, "The C launcher")';

export interface HostLauncherOptions {
  /** The binary built with the checkout (`npm run build`): taken where it runs here and is of `source`. */
  prebuilt: string;
  /** Where the agent keeps the one it builds: its data directory's launcher/. */
  cacheDir: string;
  /** Default launcher.c beside this module. */
  source?: string;
  /** Default $CC, else cc. */
  cc?: string;
  log: (line: string) => void;
  /** Told of the private directory this start built into where the data directory could not keep the build: the agent removes it when it stops. */
  madeTemporary?: (dir: string) => void;
}

/** The binary to start the C launcher from, or null (said in the log) where none built for this host and source can be had. */
export function hostLauncher(o: HostLauncherOptions): string | null {
  const source = o.source ?? LAUNCHER_SOURCE;
  const cc = o.cc ?? (process.env.CC || 'cc');
  let hash: string;
  try {
    hash = launcherSourceHash(readFileSync(source));
  } catch (err) {
    o.log(`the C launcher's source cannot be read (${errorText(err)}); ${FALLBACK}`);
    return null;
  }
  const passedOver: string[] = [];
  const usable = (file: string): boolean => {
    // Asked nothing, not even its version, where another user could have put it there (others-can-change.ts).
    const unsafe = othersCanChange(file);
    if (unsafe) {
      passedOver.push(`${file} is not run: ${unsafe}`);
      return false;
    }
    const v = launcherVersion(file);
    if (v.kind === 'runs' && v.source === hash) return true;
    if (v.kind === 'runs') passedOver.push(`${file} was built from another launcher.c (${v.source}; this agent's is ${hash})`);
    else if (v.kind === 'unusable') passedOver.push(`${file} cannot be used: ${v.why}`);
    return false;
  };
  if (usable(o.prebuilt)) return o.prebuilt;
  const host = `${process.platform}-${process.arch}`;
  // A data directory another user could change (started from their directory, say) keeps no
  // binary for root to run: this start builds into a directory of its own, made private now.
  let cacheDir = o.cacheDir;
  const unsafeDir = othersCanChange(cacheDir);
  if (unsafeDir) {
    sweepTemporaryBuilds(tmpdir());
    try {
      cacheDir = mkdtempSync(join(tmpdir(), TEMPORARY_PREFIX));
      // Whose it is, so that another agent's sweep leaves it while this one lives (sweepTemporaryBuilds).
      writeFileSync(join(cacheDir, OWNER_FILE), processIdentity(process.pid) ?? '');
    } catch (err) {
      o.log(`C launcher: ${o.cacheDir} is not used (${unsafeDir}) and no private directory could be made (${errorText(err)}); ${FALLBACK}`);
      return null;
    }
    passedOver.push(`${o.cacheDir} is not used to keep it: ${unsafeDir}; built into ${cacheDir} for this start`);
  }
  const got = builtIn(cacheDir, { o, source, cc, hash, host, passedOver, usable });
  if (unsafeDir) {
    // Nothing is kept in it past this start: gone now if nothing was built, else when the agent stops.
    if (got === null) rmSync(cacheDir, { recursive: true, force: true });
    else o.madeTemporary?.(cacheDir);
  }
  return got;
}

/** What hostLauncher found out before it looks in (or builds into) the directory that keeps the build. */
interface Search {
  o: HostLauncherOptions;
  source: string;
  cc: string;
  hash: string;
  host: string;
  /** The candidates passed over so far, and why: said in the one line logged. */
  passedOver: string[];
  usable: (file: string) => boolean;
}

/** The build kept in cacheDir where it runs here, else one built there now; null (said in the log) where none can be had. */
function builtIn(cacheDir: string, { o, source, cc, hash, host, passedOver, usable }: Search): string | null {
  const own = join(cacheDir, `gantry-launcher-${host}-${hash}`);
  if (usable(own)) {
    if (passedOver.length > 0) o.log(`C launcher: ${passedOver.join('; ')}; using ${own}, built on this host`);
    return own;
  }
  const why = passedOver.length > 0 ? `${passedOver.join('; ')}; ` : '';
  const t0 = performance.now();
  try {
    mkdirSync(cacheDir, { recursive: true, mode: 0o700 });
  } catch (err) {
    o.log(`C launcher: ${why}cannot make ${cacheDir} to build it in (${errorText(err)}); ${FALLBACK}`);
    return null;
  }
  // No -Werror here: a warning of another compiler is no reason to run slower. The build's own check keeps it (build-launcher.ts).
  const r = compileLauncher({ source, out: own, cc, flags: ['-O2'] });
  switch (r.kind) {
    case 'no-compiler':
      o.log(`C launcher: ${why}it cannot be built for this host: no C compiler (${r.why}; install one, or name it in $CC, and restart the agent); ${FALLBACK}`);
      return null;
    case 'failed':
      o.log(`C launcher: ${why}it could not be built for this host: ${cc} says "${r.firstError}"; ${FALLBACK}`);
      return null;
    case 'built':
      break;
  }
  const built = launcherVersion(own);
  if (built.kind !== 'runs' || built.source !== hash) {
    rmSync(own, { force: true });
    o.log(`C launcher: ${why}the one built for this host does not answer as it should (${built.kind === 'unusable' ? built.why : built.kind}); ${FALLBACK}`);
    return null;
  }
  removeOthers(cacheDir, basename(own));
  o.log(`C launcher: ${why}built for this host (${host}) into ${own} in ${Math.round(performance.now() - t0)} ms`);
  return own;
}

const TEMPORARY_PREFIX = 'gantry-launcher-';
/** A private build directory's name: the prefix and mkdtemp's six characters. */
const TEMPORARY_NAME = new RegExp(`^${TEMPORARY_PREFIX}[A-Za-z0-9]{6}$`);
/** How old a private build directory must be before a later start may take it for one a crashed agent left. */
const TEMPORARY_SWEEP_AGE_MS = 10 * 60_000;

/** In a private build directory: the agent's pid and its start time (processIdentity), written when it is made. */
const OWNER_FILE = 'owner';

/**
 * The private build directories that agents which ended without stopping (a crash, a kill) left
 * in the temporary directory: this user's, older than ten minutes, whose owner (the pid and start
 * time written in it) is no longer running, and with no process running a binary from them
 * (/proc/<pid>/exe). Where /proc cannot be read, nothing is swept. Only where the agent makes one
 * itself, so a host whose data directories are safe never looks.
 */
export function sweepTemporaryBuilds(dir: string, now = Date.now()): void {
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => TEMPORARY_NAME.test(n));
  } catch {
    return;
  }
  if (names.length === 0) return;
  const pids = procPids();
  if (pids === null) return;
  const running = runningExecutables(pids);
  const uid = process.getuid?.();
  for (const name of names) {
    const path = join(dir, name);
    try {
      const st = lstatSync(path);
      if (!st.isDirectory() || (uid !== undefined && st.uid !== uid) || now - st.mtimeMs < TEMPORARY_SWEEP_AGE_MS) continue;
      if (ownerAlive(join(path, OWNER_FILE))) continue;
      const real = realpathSync(path);
      if (running.some((exe) => exe.startsWith(`${real}/`))) continue;
      rmSync(path, { recursive: true, force: true });
    } catch {
      // Gone already, or not ours to read: left as it is.
    }
  }
}

/** "<pid> <start time in clock ticks since boot>" (/proc/<pid>/stat's 22nd field): names one process, whatever reuses its pid later. Null where it cannot be read. */
function processIdentity(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after "(comm)", which may hold spaces: the start time is the 20th of them.
    const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    return start ? `${pid} ${start}` : null;
  } catch {
    return null;
  }
}

function ownerAlive(file: string): boolean {
  let owner: string;
  try {
    owner = readFileSync(file, 'utf8').trim();
  } catch {
    return false;
  }
  const pid = Number(owner.split(' ')[0]);
  return owner !== '' && Number.isInteger(pid) && pid > 0 && processIdentity(pid) === owner;
}

/** Every process's executable, as /proc names it (a removed one keeps its path, with " (deleted)" after it). */
function runningExecutables(pids: string[]): string[] {
  const out: string[] = [];
  for (const pid of pids) {
    try {
      out.push(readlinkSync(`/proc/${pid}/exe`));
    } catch {
      // A kernel thread, a process gone, or another user's where not root.
    }
  }
  return out;
}

/** Builds of older sources (or another host's, a data directory moved), and what a build cut short left: only this one is kept. */
function removeOthers(dir: string, keep: string): void {
  for (const name of readdirSync(dir)) {
    if (name !== keep && /^\.?gantry-launcher-/.test(name)) rmSync(join(dir, name), { force: true });
  }
}

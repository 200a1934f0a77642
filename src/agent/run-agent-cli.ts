/**
 * `gantry agent`: detect this machine, run an Agent until it is told to stop.
 *
 * SIGTERM (a supervisor restarting or upgrading it): the agent stops and leaves its attempts
 * running; its next start re-attaches to them (docs/agent.md, "Restarts"). SIGINT (stopping for
 * good): it drains its machine and exits once its attempts have ended; a second SIGINT has them
 * stopped at once and requeued elsewhere. Under `gantry up` (--exit-with-parent) any signal, or
 * `up` going away, kills the attempts, since the whole cluster stops; there Ctrl-C reaches the agent
 * twice, as SIGINT from the terminal and SIGTERM from `up`, and that must still be a graceful stop:
 * only the same signal a second time exits at once.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { checkTransport } from './link/check-transport.js';
import { Agent, DEFAULT_REPORTS_IN_FLIGHT } from './agent.js';
import { lineWriter } from './line-writer.js';
import { detectMachine, parseLabels } from './machine/machine-detect.js';
import { rendezvousFromFlags } from './rendezvous-options.js';
import { errorText } from '../lib/error-text.js';
import { PRIVATE_UMASK } from '../lib/private-mode.js';
import { GPU_SHARING_MODES, type GpuSharingMode } from '../api/contract/containment.js';
import { DEFAULT_CONTAINMENT, parseContainmentMode, parsePidsMax, parseUidRange, type ContainmentOptions } from './contain/containment-options.js';

export interface AgentCommandOptions {
  server: string;
  name?: string;
  dataDir?: string;
  checkpointDir?: string;
  cpu?: string;
  memory?: string;
  gpus?: string;
  region?: string;
  label?: string[];
  /** Stop (as on SIGTERM) when standard input closes: `gantry up` ties its agents' lives to its own this way. */
  exitWithParent?: boolean;
  /** Log lines as JSON objects ({t, agent, msg}) instead of text. */
  json?: boolean;
  /** A line for every step of every attempt (also GANTRY_LOG_LEVEL=debug). */
  verbose?: boolean;
  /** A join token (else $GANTRY_JOIN_TOKEN, else --token-file). */
  token?: string;
  tokenFile?: string;
  /** A file with the PEM of the CA that signed the server's certificate (else $GANTRY_CA). */
  ca?: string;
  /** docs/containment.md */
  containment?: string;
  requireContainment?: boolean;
  uidRange?: string;
  runAs?: string;
  pidsMax?: string;
  sandbox?: boolean;
  /** docs/machines.md, "A share of a GPU": mps or time-slicing (else $GANTRY_GPU_SHARING). */
  gpuSharing?: string;
  /** docs/gangs.md, "Rendezvous": where other machines reach this one (else $GANTRY_ADVERTISE_ADDR, else the host's name), and the ports kept for gangs (else $GANTRY_GANG_PORTS, else 29500-29599). */
  advertiseAddr?: string;
  gangPorts?: string;
  /** Reports in flight at once (else $GANTRY_REPORTS_IN_FLIGHT, else 1): Reporter's maxInFlight. */
  reportsInFlight?: string;
}

/** `--gpu-sharing`, or $GANTRY_GPU_SHARING: `mps` or `time-slicing` (the default); anything else throws, naming it. */
export function gpuSharingFromFlags(opts: Pick<AgentCommandOptions, 'gpuSharing'>, env: NodeJS.ProcessEnv): GpuSharingMode {
  const text = opts.gpuSharing ?? (env.GANTRY_GPU_SHARING || undefined) ?? 'time-slicing';
  const mode = GPU_SHARING_MODES.find((m) => m === text.trim().toLowerCase());
  if (!mode) throw new Error(`--gpu-sharing "${text}" is not one of ${GPU_SHARING_MODES.join(', ')}`);
  return mode;
}

/** The containment flags, or their environment variables, as options; a bad one throws, naming it. */
export function containmentFromFlags(opts: AgentCommandOptions, env: NodeJS.ProcessEnv): ContainmentOptions {
  const modeText = opts.requireContainment ? 'require' : (opts.containment ?? env.GANTRY_CONTAINMENT);
  const rangeText = opts.uidRange ?? env.GANTRY_UID_RANGE;
  const pidsText = opts.pidsMax ?? env.GANTRY_PIDS_MAX;
  return {
    ...DEFAULT_CONTAINMENT,
    ...(modeText !== undefined ? { mode: parseContainmentMode(modeText) } : {}),
    ...(rangeText !== undefined ? { uidRange: parseUidRange(rangeText) } : {}),
    runAs: opts.runAs ?? env.GANTRY_RUN_AS ?? null,
    ...(pidsText !== undefined ? { pidsMax: parsePidsMax(pidsText) } : {}),
    sandbox: opts.sandbox ?? env.GANTRY_SANDBOX === '1',
  };
}

/** Reports in flight at once, from the flag or its variable; a bad one throws, naming it. */
export function reportsInFlightFromFlags(opts: Pick<AgentCommandOptions, 'reportsInFlight'>, env: NodeJS.ProcessEnv): number {
  const text = opts.reportsInFlight ?? (env.GANTRY_REPORTS_IN_FLIGHT || undefined);
  if (text === undefined) return DEFAULT_REPORTS_IN_FLIGHT;
  const n = Number(text.trim());
  if (!Number.isInteger(n) || n < 1 || n > 8) throw new Error(`--reports-in-flight "${text}": a whole number from 1 to 8`);
  return n;
}

/** Resolves once the agent has stopped after a signal. */
export async function runAgentCommand(opts: AgentCommandOptions): Promise<void> {
  // Whatever the umask it was started with, what the agent makes (credential, journal, attempts'
  // logs) is its user's only; the commands it starts are given their own (docs/containment.md).
  process.umask(PRIVATE_UMASK);
  const machine = await detectMachine({
    ...(opts.name !== undefined ? { name: opts.name } : {}),
    ...(opts.cpu !== undefined ? { cpu: opts.cpu } : {}),
    ...(opts.memory !== undefined ? { memory: opts.memory } : {}),
    ...(opts.gpus !== undefined ? { gpus: opts.gpus } : {}),
    ...(opts.region !== undefined ? { region: opts.region } : {}),
    labels: parseLabels(opts.label ?? []),
  });
  // Absolute, because attempts get GANTRY_OUTPUT_DIR and GANTRY_INPUT_DIR under it and run elsewhere.
  const dataDir = resolve(opts.dataDir ?? `./.gantry-agent-${machine.name}`);
  const write = lineWriter(process.stderr);
  const emit = opts.json
    ? (line: string) => write(JSON.stringify({ t: new Date().toISOString(), agent: machine.name, msg: line.replace(/^agent [^:]+: /, '') }))
    : write;
  const verbose = opts.verbose ?? process.env.GANTRY_LOG_LEVEL === 'debug';
  const joinToken = opts.token ?? (process.env.GANTRY_JOIN_TOKEN || undefined) ?? (opts.tokenFile ? readTokenFile(opts.tokenFile) : null);
  checkTransport(opts.server);
  const caFile = opts.ca ?? process.env.GANTRY_CA;
  const ca = caFile ? readFileSync(caFile, 'utf8') : undefined;
  const checkpointRoot = opts.checkpointDir ?? process.env.GANTRY_CHECKPOINT_ROOT;
  const containment = containmentFromFlags(opts, process.env);
  const gpuSharing = gpuSharingFromFlags(opts, process.env);
  const rendezvous = rendezvousFromFlags(opts, process.env);
  const reportsInFlight = reportsInFlightFromFlags(opts, process.env);
  const agent = new Agent({
    reportsInFlight,
    containment,
    gpuSharing,
    rendezvous,
    serverUrl: opts.server,
    dataDir,
    machine,
    log: emit,
    verbose,
    joinToken,
    ...(ca ? { ca } : {}),
    ...(checkpointRoot ? { checkpointRoot } : {}),
  });
  const types = [...new Set(machine.gpus.map((g) => g.type))].join(', ');
  const gpus = machine.gpus.length === 0 ? 'no GPUs' : `${machine.gpus.length}${machine.gpusDeclared ? ' declared' : ''} GPU(s) (${types})`;
  const say = (line: string) => emit(`agent ${machine.name}: ${line}`);
  const sharing = machine.gpus.length === 0 ? '' : gpuSharing === 'mps' ? ', shares bounded by MPS' : ', shares time-sliced (not bounded)';
  say(`${machine.cpuMillis / 1000} CPU, ${Math.round(machine.memoryBytes / 1024 ** 2)} MiB, ${gpus}${sharing}; data in ${dataDir}; server ${opts.server}`);
  // A process's arguments are world-readable (ps, /proc/PID/cmdline) for as long as it runs: a
  // join token given there can be read by every user of the machine, and it lets a machine join.
  if (opts.token !== undefined)
    say(
      'warning: the join token is on the command line (--token), where every user of this machine can read it (ps, /proc/PID/cmdline) for as long as the agent runs; give it with --token-file FILE or $GANTRY_JOIN_TOKEN instead (docs/security.md)',
    );

  // Assigned in the signal handler: typed by a cast so that the await below is not narrowed to null.
  let stopping = null as Promise<void> | null;
  let onStopped: () => void = () => {};
  const stopped = new Promise<void>((r) => (onStopped = r));
  const seen = new Map<NodeJS.Signals, number>();
  // SIGTERM (a supervisor restarting or upgrading the agent) leaves the running stages running:
  // the next start re-attaches to them. SIGINT (Ctrl-C: stopping for good) drains the machine and
  // waits for them; a second SIGINT stops them at once, requeued elsewhere without using any retry
  // or budget; a third exits. `gantry up` going away kills them (the whole cluster stops).
  const onSignal = (sig: NodeJS.Signals) => {
    const n = (seen.get(sig) ?? 0) + 1;
    seen.set(sig, n);
    if (sig === 'SIGINT' && !opts.exitWithParent && n <= 2) {
      if (stopping && n === 1) return;
      say(
        n === 1
          ? 'SIGINT: draining this machine (no new work) and waiting for its running attempts to finish; SIGINT again stops them now, requeued elsewhere'
          : 'SIGINT again: stopping the running attempts now; they are requeued without using a retry',
      );
      stopping = agent.drainAndStop(n === 2).then(onStopped, (err: unknown) => {
        say(`cannot drain (${errorText(err)}); killing running attempts and stopping`);
        return agent.stop({ killRunning: true }).then(onStopped);
      });
      return;
    }
    if (n > 1) {
      say(`${sig} again, exiting without waiting`);
      process.exit(130);
    }
    if (stopping) return;
    // Under `gantry up` every signal kills: the whole cluster is stopping.
    const killRunning = sig !== 'SIGTERM' || opts.exitWithParent === true;
    say(
      killRunning
        ? `${sig}: killing running attempts and stopping`
        : `${sig}: stopping; running attempts go on, and the next start of this agent re-attaches to them`,
    );
    stopping = agent.stop({ killRunning }).then(onStopped);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  if (opts.exitWithParent) {
    // The parent holds the other end of our stdin; it closes however the parent dies, SIGKILL
    // included. An orphaned local agent would otherwise keep running against a dead server and
    // collide with the one a restarted `gantry up` starts on the same data directory.
    process.stdin.on('data', () => {});
    process.stdin.on('end', () => {
      say('parent gone (stdin closed)');
      onSignal('SIGINT');
    });
  }
  try {
    await agent.start();
    await stopped;
    await stopping;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    // The lifeline would keep the event loop, and so this process, alive after the agent stopped.
    if (opts.exitWithParent) process.stdin.destroy();
  }
}

function readTokenFile(file: string): string {
  try {
    const t = readFileSync(file, 'utf8').trim();
    if (t) return t;
  } catch (err) {
    throw new Error(`--token-file ${file}: ${errorText(err)}`);
  }
  throw new Error(`--token-file ${file} is empty`);
}

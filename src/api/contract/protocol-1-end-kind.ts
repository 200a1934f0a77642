import type { AttemptEndKind } from './attempt-end.js';

/**
 * The words agents of protocol 1 (every release before typed ends) began a `reason` with, and the
 * kind each meant: those agents sent the text in their outcomes and wrote it in their journals'
 * exit records. Read in two places only, each once at its edge: the server types a protocol-1
 * outcome (src/api/legacy-attempt-end.ts), and an upgraded agent types the exit records its
 * predecessor left on disk (src/agent/attempt/exit-end.ts). These are the agent's own texts, as
 * every release wrote them (src/agent: process-runner.ts, launcher.ts, agent.ts and
 * deliver-outcome.ts of those releases; `git log -S` finds no other wording): frozen, since no
 * agent of protocol 1 will ever be written again.
 */
/** The kinds a protocol-1 reason could name: ends the agent caused or that came around the process. */
export type Protocol1EndKind = Extract<AttemptEndKind, 'spawn-failed' | 'timeout' | 'killed' | 'inputs-failed' | 'outputs-failed'>;

const PROTOCOL_1_PREFIXES: readonly (readonly [prefix: string, kind: Protocol1EndKind])[] = [
  // `spawn failed: ENOENT: x is not in PATH`, `spawn failed: the launcher exited before starting it`
  ['spawn failed', 'spawn-failed'],
  // `timeout after 60 s` (the kill that timeoutSeconds asks for; the signal is reported beside it)
  ['timeout after ', 'timeout'],
  // `killed: canceled`, `killed: stale: …`, `killed: agent stopping`: the agent killed it when told
  ['killed: ', 'killed'],
  // `input download failed: …`
  ['input download failed', 'inputs-failed'],
  // `output upload failed: … (the process exited 0)`
  ['output upload failed', 'outputs-failed'],
];

/**
 * The kind a protocol-1 reason names, or null for a text that names none (`ended while the agent
 * was restarting, with no exit status recorded`): the process's own end then, which the caller
 * tells from the exit code and signal.
 */
export function protocol1EndKind(reason: string): Protocol1EndKind | null {
  for (const [prefix, kind] of PROTOCOL_1_PREFIXES) if (reason.startsWith(prefix)) return kind;
  return null;
}

import { type AttemptEnd, AttemptEndKind } from '../domain/attempt-end.js';

/**
 * The words agents of protocol 1 (every release before typed ends) began their `reason` with, and
 * the kind each meant. The only place on the server that reads an outcome's wording: an outcome
 * is typed here, at the API's edge, once, and nothing past it reads the text. These are the
 * agent's own texts, as every release wrote them (src/agent: process-runner.ts, launcher.ts,
 * agent.ts and deliver-outcome.ts of those releases; `git log -S` finds no other wording): frozen, since no agent of
 * protocol 1 will ever be written again.
 */
const PROTOCOL_1_PREFIXES: readonly (readonly [prefix: string, kind: AttemptEndKind])[] = [
  // `spawn failed: ENOENT: x is not in PATH`, `spawn failed: the launcher exited before starting it`
  ['spawn failed', AttemptEndKind.spawnFailed],
  // `timeout after 60 s` (the kill that timeoutSeconds asks for; the signal is reported beside it)
  ['timeout after ', AttemptEndKind.timeout],
  // `killed: canceled`, `killed: stale: …`, `killed: agent stopping`: the agent killed it when told
  ['killed: ', AttemptEndKind.killed],
  // `input download failed: …`
  ['input download failed', AttemptEndKind.inputsFailed],
  // `output upload failed: … (the process exited 0)`
  ['output upload failed', AttemptEndKind.outputsFailed],
];

/**
 * A protocol 1 outcome's end, from its exit code, signal and reason text. A text it does not know
 * (`ended while the agent was restarting, with no exit status recorded`, or anything an agent of
 * that protocol might have said) is the process's own end: signaled when a signal is named, else
 * exited; the text stays as the detail, so people still read it.
 */
export function legacyAttemptEnd(o: { exitCode: number | null; signal: string | null; reason: string | null }): AttemptEnd {
  if (o.reason !== null) {
    for (const [prefix, kind] of PROTOCOL_1_PREFIXES) if (o.reason.startsWith(prefix)) return { kind, detail: o.reason };
  }
  return { kind: o.signal !== null ? AttemptEndKind.signaled : AttemptEndKind.exited, detail: o.reason };
}

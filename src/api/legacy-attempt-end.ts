import { type AttemptEnd, AttemptEndKind } from '../domain/attempt-end.js';
import { protocol1EndKind } from './contract/protocol-1-end-kind.js';

/**
 * A protocol 1 outcome's end, from its exit code, signal and reason text: the only place on the
 * server that reads an outcome's wording (the words and their kinds: protocol-1-end-kind.ts). An
 * outcome is typed here, at the API's edge, once, and nothing past it reads the text. A text that
 * names no kind (`ended while the agent was restarting, with no exit status recorded`, or anything
 * an agent of that protocol might have said) is the process's own end: signaled when a signal is
 * named, else exited; the text stays as the detail, so people still read it.
 */
export function legacyAttemptEnd(o: { exitCode: number | null; signal: string | null; reason: string | null }): AttemptEnd {
  const named = o.reason !== null ? protocol1EndKind(o.reason) : null;
  return { kind: named ?? (o.signal !== null ? AttemptEndKind.signaled : AttemptEndKind.exited), detail: o.reason };
}

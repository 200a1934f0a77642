import type { AttemptEnd } from '../../api/contract/attempt-end.js';
import { protocol1EndKind } from '../../api/contract/protocol-1-end-kind.js';
import type { ExitKind, ExitRecord } from '../disk/attempt-journal.js';

/** CompletedItem.reason's and AttemptEnd.detail's limit. */
export const MAX_DETAIL = 2000;

/**
 * The typed end an outcome carries for a recorded exit; null for one that is never reported (how
 * it ended cannot be known: the server reaps it as lost).
 */
export function exitEnd(exit: ExitRecord): AttemptEnd | null {
  const kind = exit.kind ?? legacyExitKind(exit);
  if (kind === 'unknown') return null;
  return { kind, detail: exit.reason === null ? null : exit.reason.slice(0, MAX_DETAIL) };
}

/**
 * The kind of an exit recorded by an agent before typed ends (no `kind` in its journal), read once
 * here so that an upgraded agent still reports what its predecessor left on disk. Those agents
 * wrote a reason only for an end they caused or a failure around the process, in the words
 * protocol 1's outcomes carried (protocol1EndKind); with none, the process's own end.
 */
export function legacyExitKind(exit: Pick<ExitRecord, 'exitCode' | 'signal' | 'reason'>): ExitKind {
  const named = exit.reason !== null ? protocol1EndKind(exit.reason) : null;
  return named ?? (exit.exitCode !== null ? 'exited' : exit.signal !== null ? 'signaled' : 'unknown');
}

import type { AttemptEnd } from '../../api/contract/attempt-end.js';
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
 * wrote a reason only for an end they caused or a failure around the process, with these prefixes.
 */
export function legacyExitKind(exit: Pick<ExitRecord, 'exitCode' | 'signal' | 'reason'>): ExitKind {
  const r = exit.reason;
  if (r === null) return exit.exitCode !== null ? 'exited' : exit.signal !== null ? 'signaled' : 'unknown';
  if (r.startsWith('spawn failed')) return 'spawn-failed';
  if (r.startsWith('timeout')) return 'timeout';
  if (r.startsWith('killed')) return 'killed';
  if (r.startsWith('input download failed')) return 'inputs-failed';
  if (r.startsWith('output upload failed')) return 'outputs-failed';
  return exit.exitCode !== null ? 'exited' : exit.signal !== null ? 'signaled' : 'unknown';
}

/**
 * An agent's data directory made private at its start (docs/containment.md, "Private files"):
 * the modes of lib/private-mode.ts given to what an earlier version left (0755 and 0644 under
 * umask 022, readable by every user of the machine, stages included), where the agent's own
 * umask (PRIVATE_UMASK) only covers what it makes from now on.
 *
 * Only places this agent made are touched: its known files by name, attempts/ and the checkpoint
 * directories, whole; a data directory given as a directory that holds other things (a home) keeps
 * those as they are. Bounded: the attempts kept (50 settled, 64 spares, those running) and the
 * checkpoint directories, two levels deep; nothing a stage made inside its own directories is
 * walked (they are the stage's, and private by their own directory's mode).
 */
import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import { privateMode } from '../../lib/private-mode.js';
import { ModeTightener } from './mode-tightener.js';

/** Files the agent keeps at the top of its data directory (agent-state.ts, attempt-journal.ts). */
const AGENT_FILES = new Set(['agent.json', 'credential', 'attempts.journal', 'attempts.journal.tmp']);
/** write-file-atomic.ts's temporary files (`.agent.json.<tag>.<n>.tmp`), which a crash can leave. */
const ATOMIC_TMP = /^\.(agent\.json|credential)\..+\.tmp$/;

/** Tightens the agent's files in `dataDir` and its checkpoint directories; `into` collects what changed and what could not be done. */
export function makeAgentFilesPrivate(dataDir: string, checkpointRoot: string, into = new ModeTightener()): ModeTightener {
  if (into.set(dataDir, privateMode('agent-data-dir'), { follow: true })?.kind === 'dir') {
    for (const e of into.entries(dataDir)) if (AGENT_FILES.has(e.name) || ATOMIC_TMP.test(e.name)) into.set(join(dataDir, e.name), privateMode('file'));
    attemptsPrivate(into, join(dataDir, 'attempts'));
  }
  checkpointsPrivate(into, checkpointRoot);
  return into;
}

function attemptsPrivate(t: ModeTightener, attempts: string): void {
  if (t.set(attempts, privateMode('attempts-dir'))?.kind !== 'dir') return;
  for (const e of t.entries(attempts)) {
    const dir = join(attempts, e.name);
    // An attempt's directory, or a spare: its logs, status, progress file (and an older agent's
    // record files, assignment.json with the stage's environment) are the agent's files.
    // A settled attempt's directory is closed (0700: attempt-owner.ts) and stays so; one still
    // open is its running attempt's passage (0711), or was left wider by an earlier version.
    const closed = e.isDirectory() && (lstatSync(dir, { throwIfNoEntry: false })?.mode ?? 0) % 0o1000 === privateMode('settled-attempt-dir');
    if (t.set(dir, privateMode(!e.isDirectory() ? 'file' : closed ? 'settled-attempt-dir' : 'attempt-dir'))?.kind !== 'dir') continue;
    for (const f of t.entries(dir)) {
      if (f.isDirectory()) t.set(join(dir, f.name), privateMode('attempt-own-dir'));
      else if (f.isFile()) t.set(join(dir, f.name), privateMode('file'));
    }
  }
}

/** <root>/<job>/<stage>/: the root is the operator's (--checkpoint-dir, or checkpoints/ in the data directory), and may be a link. */
function checkpointsPrivate(t: ModeTightener, root: string): void {
  if (t.set(root, privateMode('checkpoint-root'), { follow: true })?.kind !== 'dir') return;
  for (const j of t.entries(root)) {
    const job = join(root, j.name);
    if (t.set(job, privateMode(j.isDirectory() ? 'checkpoint-job-dir' : 'file'))?.kind !== 'dir') continue;
    for (const s of t.entries(job)) t.set(join(job, s.name), privateMode(s.isDirectory() ? 'checkpoint-dir' : 'file'));
  }
}

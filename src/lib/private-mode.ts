/**
 * The permissions of every place the server and the agent keep on disk (docs/containment.md,
 * "Private files"): owner-only whatever the umask, except the directories a stage running as a
 * user of its own must pass through to reach its own directories, which others may traverse but
 * not list (0711). The same layout whatever the agent's containment, so that a restart with other
 * flags finds nothing to change, and so that a test can check the whole tree against this table.
 *
 * Pure, in lib/: the agent (its data directory, attempts' directories) and the server (its data
 * directory, and under `gantry up` its agents') both read it.
 */

/** What the server, the agent and `gantry up` run under: a file or directory they make is their user's only. */
export const PRIVATE_UMASK = 0o077;

export type PrivatePlace =
  /** Any file of the server's or the agent's: database and its -wal/-shm, tokens, credential, journal, logs, blobs. */
  | 'file'
  /** Any directory not named below (the artifacts and what is under them, a server's own data directory). */
  | 'dir'
  /** `gantry server`'s data directory: nothing in it is a stage's. */
  | 'server-data-dir'
  /** `gantry up`'s data directory: its agents' directories are below it (agents/<machine>/). */
  | 'up-data-dir'
  /** `gantry up`'s agents/, on the way to each agent's data directory. */
  | 'up-agents-dir'
  /** An agent's data directory: on the way to attempts/ (its own files in it stay 0600). */
  | 'agent-data-dir'
  /** An agent's attempts/. */
  | 'attempts-dir'
  /** One attempt's directory (and an emptied one kept as a spare): on the way to its work/, output/ and input/. */
  | 'attempt-dir'
  /** A settled attempt's directory: closed before its uid can go to another attempt (attempt-owner.ts). */
  | 'settled-attempt-dir'
  /** An attempt's work/, output/ or input/: its user's own. */
  | 'attempt-own-dir'
  /** Where checkpoint directories live (the agent's checkpoints/, or --checkpoint-dir). */
  | 'checkpoint-root'
  /** checkpoints/<job>/, on the way to its stages' checkpoint directories. */
  | 'checkpoint-job-dir'
  /** checkpoints/<job>/<stage>/: its attempts' user's own. */
  | 'checkpoint-dir';

/** The mode `place` has: 0600 for files, 0700 for directories, 0711 for the ones on the way to a stage's own. */
export function privateMode(place: PrivatePlace): number {
  switch (place) {
    case 'file':
      return 0o600;
    case 'dir':
    case 'server-data-dir':
    case 'attempt-own-dir':
    case 'settled-attempt-dir':
    case 'checkpoint-dir':
      return 0o700;
    case 'up-data-dir':
    case 'up-agents-dir':
    case 'agent-data-dir':
    case 'attempts-dir':
    case 'attempt-dir':
    case 'checkpoint-root':
    case 'checkpoint-job-dir':
      return 0o711;
  }
}

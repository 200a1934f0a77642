/**
 * What `gantry` exits with, so that scripts and CI can branch on the outcome without parsing text.
 * `submit --wait/--watch` maps the job's end state (or the jobs' end states) onto ok / failed / canceled.
 */
export const ExitCode = {
  /** Done; or the waited-for job succeeded. */
  ok: 0,
  /** The waited-for job failed, or an unexpected error (including a server error). */
  failed: 1,
  /** Bad usage or input: unknown option, unreadable file, invalid job spec, rejected request. */
  usage: 2,
  /** The waited-for job was canceled. */
  canceled: 3,
  /** The job or stage named does not exist (HTTP 404). */
  notFound: 4,
  /** The server could not be reached. */
  unreachable: 5,
  /** The server refused the token (none, unknown, revoked: 401) or what it allows (403); or the CLI refused to send it in clear. */
  denied: 6,
  /** Ctrl-C while watching or following; the job itself was left alone. 128 + SIGINT, as shells expect. */
  interrupted: 130,
  /** Whoever read stdout stopped reading (`gantry events | head`): 128 + SIGPIPE, what a Unix tool killed by it reports. */
  brokenPipe: 141,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** The exit code for a job's terminal state (`submit --wait`). */
export function exitCodeForJobState(state: string): ExitCode {
  if (state === 'succeeded') return ExitCode.ok;
  if (state === 'canceled') return ExitCode.canceled;
  return ExitCode.failed;
}

/** The exit code for several jobs' terminal states: failed if any failed, else canceled if any was. */
export function exitCodeForJobStates(states: readonly string[]): ExitCode {
  if (states.some((s) => exitCodeForJobState(s) === ExitCode.failed)) return ExitCode.failed;
  if (states.includes('canceled')) return ExitCode.canceled;
  return ExitCode.ok;
}

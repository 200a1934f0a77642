/** Where a command writes; process.stdout fits, and so does a test's buffer. */
export interface CliOutput {
  write(chunk: string): unknown;
  isTTY?: boolean;
  columns?: number;
  rows?: number;
}

/**
 * Whether a view may redraw in place: a terminal that reports a size. One that reports 0×0 (some
 * CI runners, `script`, a detached tmux) would get only the last line of each redraw, so it gets
 * the plain line-by-line view instead.
 */
export function canRedraw(out: CliOutput): boolean {
  return out.isTTY === true && (out.columns ?? 80) > 0 && (out.rows ?? 24) > 0;
}

/**
 * What a command touches outside itself, passed in so that commands run in-process under test.
 * `signal` aborts on Ctrl-C (watching stops, nothing is canceled); `color` overrides detection.
 */
export interface CliIo {
  stdout: CliOutput;
  stderr: CliOutput;
  signal?: AbortSignal;
  color?: boolean;
  now?: () => number;
}

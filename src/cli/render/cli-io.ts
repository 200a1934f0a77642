/** Where a command writes; process.stdout fits, and so does a test's buffer. */
export interface CliOutput {
  write(chunk: string): unknown;
  isTTY?: boolean;
  columns?: number;
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

import type { CliIo } from '../render/cli-io.js';

/**
 * Runs a command body against the real process and sets the exit code. With `interruptible`,
 * the first Ctrl-C aborts `io.signal` (the body stops watching and returns); a second one gets
 * Node's default and kills the process.
 */
export async function runAction(body: (io: CliIo) => Promise<number>, opts: { interruptible?: boolean } = {}): Promise<void> {
  const controller = new AbortController();
  const onInterrupt = () => {
    process.off('SIGINT', onInterrupt);
    controller.abort();
  };
  if (opts.interruptible) process.on('SIGINT', onInterrupt);
  try {
    process.exitCode = await body({ stdout: process.stdout, stderr: process.stderr, signal: controller.signal });
  } finally {
    process.off('SIGINT', onInterrupt);
  }
}

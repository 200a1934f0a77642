/**
 * Log lines written together, at most one write every `delayMs` (100 ms), instead of one each.
 *
 * Why: standard error is a pipe under a supervisor (or `gantry up`), and a write to a pipe is
 * synchronous in Node on Linux and wakes the reader: under load, one line per attempt cost 5 % of
 * the agent's time as separate writes (measured), and a write per turn of the event loop still
 * a tenth of a millisecond a stage on a shared two-core machine (a wake-up of the reading process
 * each, measured on the throughput bench). A line waits at most `delayMs`, and the lines still
 * waiting are written synchronously when the process exits, so an exit loses none; only a SIGKILL
 * can, the last `delayMs` of them.
 */
export function lineWriter(
  stream: Pick<NodeJS.WritableStream, 'write'>,
  opts: { delayMs?: number; maxBytes?: number; onExit?: (flush: () => void) => void } = {},
): (line: string) => void {
  const delayMs = opts.delayMs ?? 100;
  const maxBytes = opts.maxBytes ?? 64 * 1024;
  let pending: string[] = [];
  let bytes = 0;
  let timer: NodeJS.Timeout | null = null;
  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (pending.length === 0) return;
    const text = pending.join('');
    pending = [];
    bytes = 0;
    // Synchronous for files and pipes on Linux (Node's choice for stdio), so written by the time the process exits.
    stream.write(text);
  };
  (opts.onExit ?? ((f) => process.once('exit', f)))(flush);
  return (line: string) => {
    pending.push(line + '\n');
    bytes += line.length + 1;
    if (bytes >= maxBytes) return flush();
    // Unref'd: a line waiting is no reason for the process to stay up (the exit writes it).
    timer ??= setTimeout(flush, delayMs).unref();
  };
}

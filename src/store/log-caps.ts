/**
 * How much of an attempt's log the server keeps (docs/agent.md, "Logs"): its first `headBytes`, then,
 * once the process has ended, its last `tailBytes`; what lies between is dropped, and a line in the
 * log says where and how much. A rogue agent that ships past both is cut at `hardBytes` (the head, the
 * tail, and room for the piece that crosses the head's cap and the markers).
 */
export interface LogCaps {
  headBytes: number;
  tailBytes: number;
}

/** 64 MiB an attempt: its first 56 and its last 8. */
export const DEFAULT_LOG_CAPS: LogCaps = { headBytes: 56 * 2 ** 20, tailBytes: 8 * 2 ** 20 };

/** Past this nothing more is stored, whoever ships it: a piece may cross the head's cap by at most 1 MiB (the protocol's largest piece). */
export function hardLogBytes(c: LogCaps): number {
  return c.headBytes + c.tailBytes + 2 * 2 ** 20;
}

/** `36.0 MiB`, `512 B`: what a marker line and a status say of a number of bytes. */
export function sizeText(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 2 ** 20) return `${(bytes / 1024).toFixed(1)} KiB`;
  if (bytes < 2 ** 30) return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  return `${(bytes / 2 ** 30).toFixed(1)} GiB`;
}

/**
 * The line that stands where a stream's bytes [from, to) were dropped: between the head and the tail
 * kept, or at the end where no tail came (`tailKept` false: an agent from before tails).
 */
export function logCutLine(stream: 'stdout' | 'stderr', from: number, to: number, tailKept = true): string {
  const kept = tailKept ? 'the head above and the tail below are kept' : 'the head above is kept, its end was not shipped';
  return `\n[gantry: ${sizeText(to - from)} of ${stream} cut here (its bytes ${from} to ${to}); ${kept}]\n`;
}

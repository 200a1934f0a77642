import type { LogChunkView } from './job-view.js';

/**
 * A gang's logs interleaved (`rank=all`, docs/gangs.md), each line said whose: `[rank 2] `
 * before every line a member starts. Chunks are pieces of streams, not lines, so whether a
 * member's stream is at a line's start is kept per rank and stream, over every chunk given:
 * the server's text answer and the CLI's followed log write the same. A chunk of no gang is
 * written as it is.
 */
export function rankPrefixer(): (chunk: Pick<LogChunkView, 'rank' | 'stream' | 'data'>) => string {
  const midLine = new Set<string>();
  return (c) => {
    if (c.rank === undefined || c.data === '') return c.data;
    const key = `${c.rank}:${c.stream}`;
    const tag = `[rank ${c.rank}] `;
    let out = '';
    let start = !midLine.has(key);
    for (const piece of c.data.split(/(?<=\n)/)) {
      out += start ? tag + piece : piece;
      start = piece.endsWith('\n');
    }
    if (start) midLine.delete(key);
    else midLine.add(key);
    return out;
  };
}

import type { Colors } from './palette.js';

/** Colours a job, stage or attempt state so that trouble stands out in a long table. */
export function colorState(state: string, c: Colors): string {
  switch (state) {
    case 'succeeded':
      return c.green(state);
    case 'failed':
    case 'lost':
      return c.red(state);
    case 'running':
      return c.cyan(state);
    case 'scheduled':
      return c.blue(state);
    case 'ready':
    case 'queued':
      return c.yellow(state);
    case 'canceled':
    case 'skipped':
    case 'preempted':
      return c.magenta(state);
    default:
      return c.dim(state);
  }
}

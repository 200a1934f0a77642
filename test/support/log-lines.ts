import { Writable } from 'node:stream';

/** One line of the server's JSON log, as a test reads it. */
export interface LogLine {
  msg: string;
  level: number;
  [field: string]: unknown;
}

/** A logger for a control plane in a test (`createControlPlane(config, { logger })`) whose lines the test reads back. */
export function logLines(level = 'info'): { logger: { level: string; stream: Writable }; lines: LogLine[] } {
  const lines: LogLine[] = [];
  let partial = '';
  const stream = new Writable({
    write(chunk, _enc, done) {
      // A write may end mid-line: only whole lines are read.
      const parts = (partial + String(chunk)).split('\n');
      partial = parts.pop()!;
      for (const l of parts.filter(Boolean)) lines.push(JSON.parse(l) as LogLine);
      done();
    },
  });
  return { logger: { level, stream }, lines };
}

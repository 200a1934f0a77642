/**
 * TEMPORARY (branch bserver, issue 32): GANTRY_REPORT_TIMING=FILE writes one JSON line per
 * report request, with the moments of its path through the server (marks), to FILE.server and
 * the agent's side (sent, answered) to FILE.agent. Not for merging.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { appendFileSync } from 'node:fs';

export interface TimingRecord {
  marks: [string, number][];
  data: Record<string, unknown>;
}

const FILE = process.env.GANTRY_REPORT_TIMING ?? '';
const als = new AsyncLocalStorage<TimingRecord>();
const lines: string[] = [];

function flush(suffix: string): void {
  if (!lines.length) return;
  appendFileSync(`${FILE}.${suffix}`, lines.join('\n') + '\n');
  lines.length = 0;
}

let hooked = false;
export function timingOn(): boolean {
  return FILE !== '';
}

/** A new record for this request, entered into its async context. */
export function timingStart(at: number): TimingRecord | null {
  if (!FILE) return null;
  const rec: TimingRecord = { marks: [['onRequest', at]], data: {} };
  return rec;
}

export function timingEnter(rec: TimingRecord | null): void {
  if (rec) als.enterWith(rec);
}

export function timingMark(name: string, t = performance.timeOrigin + performance.now()): void {
  if (!FILE) return;
  als.getStore()?.marks.push([name, t]);
}

export function timingData(key: string, value: unknown): void {
  if (!FILE) return;
  const r = als.getStore();
  if (r) r.data[key] = value;
}

export function timingWrite(suffix: string, rec: unknown): void {
  if (!FILE) return;
  if (!hooked) {
    hooked = true;
    process.on('exit', () => flush(suffix));
  }
  lines.push(JSON.stringify(rec));
  if (lines.length >= 200) flush(suffix);
}

/** The first transaction in a request's context claims its record (a loop woken from it must not mark it). */
export function timingClaim(): ((name: string, t?: number) => void) | null {
  if (!FILE) return null;
  const r = als.getStore();
  if (!r || r.data.claimed) return null;
  r.data.claimed = true;
  return (name, t) => r.marks.push([name, t ?? performance.timeOrigin + performance.now()]);
}

/** Each statement a request's context sends on the main pool: its text's head, start and end. */
export function timeStatements(client: { query: (...args: unknown[]) => unknown }): void {
  if (!FILE) return;
  const query = client.query.bind(client);
  client.query = (...args: unknown[]) => {
    const r = als.getStore();
    const out = query(...args);
    if (!r || !(out instanceof Promise)) return out;
    const t0 = performance.timeOrigin + performance.now();
    const a0 = args[0] as string | { text?: string };
    const text = (typeof a0 === 'string' ? a0 : (a0.text ?? '')).replace(/\s+/g, ' ').slice(0, 90);
    const list = ((r.data.statements as unknown[] | undefined) ??= []) as unknown[];
    return out.finally(() => list.push([text, t0, performance.timeOrigin + performance.now()]));
  };
}

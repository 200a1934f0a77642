/**
 * How long the agent's journal holds its event loop, its compactions included
 * (docs/throughput.md, "B after A: the journal's compaction off the loop").
 *
 * An AttemptJournal fed the lines of N attempts the way the agent writes them under load: 30
 * running at a time, each an assignment (with a stage's usual fields), a cgroup and a pid record,
 * an exit made durable, a reported mark; settled ones forgotten beyond the newest 50. Every
 * synchronous call into the journal is timed (the loop is held for exactly that long), and the
 * loop's own delay is sampled meanwhile (perf_hooks, 1 ms resolution). Prints how long the loop
 * was held by each append that compacted (main: the file shrank during it) or started a
 * compaction (this build: the rest runs off the loop), and all appends' p50, p99, max and count
 * over 1 ms (on a loaded machine the max is any append preempted, compaction or not).
 *
 * Usage: node --import tsx bench/journal-stall.ts [--attempts 6000] [--journal PATH-TO-attempt-journal.ts]
 *   --journal: another build's module (e.g. main's worktree), to compare in the same minute.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { arg, num, usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

interface Journal {
  append(id: string, kind: string, value?: unknown, at?: number): void;
  durable(): Promise<void>;
  close(): void;
  /** This build's: a compaction under way off the loop (absent where compaction is synchronous). */
  readonly compacting?: boolean;
}

const N = num('attempts', 6000);
const modulePath = arg('journal', '');
const mod = (await import(modulePath ? pathToFileURL(resolve(modulePath)).href : '../src/agent/disk/attempt-journal.js')) as {
  AttemptJournal: new (dir: string) => Journal;
};

const dir = mkdtempSync(join(tmpdir(), 'gantry-journal-stall-'));
const j = new mod.AttemptJournal(dir);
const times: number[] = [];
/** The appends that compacted on the loop (the file shrank in them) or started a compaction (`compacting` turned true). */
const compacting: number[] = [];
const file = join(dir, 'attempts.journal');
const sizeNow = () => statSync(file, { throwIfNoEntry: false })?.size ?? 0;
// A call, not a property read twice: the append in between changes it.
const compactingNow = () => j.compacting === true;
const timed = (f: () => void): void => {
  const before = sizeNow();
  const was = compactingNow();
  const t = process.hrtime.bigint();
  f();
  const ms = Number(process.hrtime.bigint() - t) / 1e6;
  times.push(ms);
  if (sizeNow() < before || (!was && compactingNow())) compacting.push(ms);
};
const assignment = (id: string, i: number) => ({
  attemptId: id,
  token: 1,
  jobId: `job_${i}`,
  stageName: 'b',
  attemptNumber: 1,
  command: ['true'],
  env: { GANTRY_BENCH: 'x'.repeat(40) },
  gpuIndices: [],
  timeoutSeconds: null,
  inputs: [{ stage: 'a', attemptId: `att_up_${i}`, files: [] }],
  started: true,
  resources: { cpuMillis: 100, memoryBytes: 16 * 1024 * 1024 },
});

const delay = monitorEventLoopDelay({ resolution: 1 });
delay.enable();
const settled: string[] = [];
const running: Promise<void>[] = [];
const t0 = Date.now();
for (let i = 0; i < N; i++) {
  const id = `att_${String(i).padStart(8, '0')}`;
  timed(() => j.append(id, 'assignment', assignment(id, i), Date.now()));
  timed(() => j.append(id, 'cgroup', { name: id, baseline: { cpuUsec: 0, oomKills: 0 } }));
  timed(() => j.append(id, 'pid', { pid: 10_000 + i, bootId: 'b', startTime: null, recordedAtUptime: 1, at: Date.now() }));
  running.push(
    (async () => {
      await new Promise((r) => setImmediate(r));
      timed(() => j.append(id, 'exit', { kind: 'exited', exitCode: 0, signal: null, reason: null, finishedAt: new Date().toISOString() }));
      await j.durable();
      timed(() => j.append(id, 'reported', { result: 'accepted', at: new Date().toISOString() }));
      settled.push(id);
      while (settled.length > 50) {
        const old = settled.shift()!;
        timed(() => j.append(old, 'removed'));
      }
    })(),
  );
  if (running.length >= 30) await running.shift();
}
await Promise.all(running);
await j.durable();
const wallMs = Date.now() - t0;
delay.disable();
j.close();
rmSync(dir, { recursive: true, force: true });

times.sort((a, b) => a - b);
const q = (p: number) => times[Math.min(times.length - 1, Math.floor(p * times.length))]!;
const over1 = times.filter((t) => t > 1).length;
console.log(
  `${modulePath || 'this build'}: ${N} attempts, ${times.length} appends in ${wallMs} ms; compactions ${compacting.length}, the loop held in them ${compacting.map((t) => t.toFixed(2)).join(', ')} ms; ` +
    `append p50 ${q(0.5).toFixed(3)} p99 ${q(0.99).toFixed(3)} max ${times.at(-1)!.toFixed(2)} ms, ${over1} over 1 ms; ` +
    `event loop delay p99 ${(delay.percentile(99) / 1e6).toFixed(2)} max ${(delay.max / 1e6).toFixed(2)} ms`,
);

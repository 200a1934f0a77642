/**
 * Issue 2's numbers, measured on a real `gantry up` (built dist/, default cluster, temp data dir):
 *  1. the example pipeline, submit to success (median of N runs);
 *  2. ready-to-process-start latency over 100 trivial stages: a chain of 100 stages, each ready
 *     when the one before succeeds; "ready" is the server's stage:ready event time, "started" is
 *     the time the stage's own process wrote (same host, same clock);
 *  3. the floor for (2), in the same run: Node spawning the same `sh` command directly;
 *  4. the peer for (2), in the same run: BullMQ on the local Redis (bench/peers/), enqueue to
 *     process start, one job at a time, skipped when no Redis answers on 127.0.0.1:6379.
 * Usage: npm run bench:latency [-- --runs 3 --stages 100]
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { api, isTerminal, jobOf, REPO, startGantryUp, submit, until } from '../test/support/gantry-process.js';
import { bullmqStartLatency } from './peers/bullmq-start-latency.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const RUNS = arg('runs', 3);
const STAGES = arg('stages', 100);
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const STAMP = 'echo $(($(date +%s%N) / 1000)) > "$GANTRY_OUTPUT_DIR/t"';

async function spawnFloor(n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.timeOrigin + performance.now();
    const child = spawn('sh', ['-c', 'echo $(($(date +%s%N) / 1000))'], { detached: true, stdio: ['ignore', 'pipe', 'ignore'] });
    let text = '';
    child.stdout.on('data', (d) => (text += d));
    await new Promise((r) => child.on('close', r));
    out.push(Number(text.trim()) / 1000 - t0);
  }
  return out;
}

async function main() {
  const g = await startGantryUp();
  try {
    await until(
      'machines',
      () => api(g.url, '/v1/machines'),
      (r) => r.body.machines?.length === 2,
    );
    console.log(`gantry up at ${g.url}, data ${g.dataDir}`);

    const spec = parse(readFileSync(join(REPO, 'examples/pipeline.yaml'), 'utf8'));
    const e2e: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = Date.now();
      const r = await submit(g.url, spec);
      const job = await until('example ends', () => jobOf(g.url, r.body.id), isTerminal, 120_000);
      if (job.state !== 'succeeded') throw new Error(`example ${job.state}: ${job.failureReason}`);
      e2e.push(Date.now() - t0);
    }

    const chain = {
      name: 'latency-chain',
      stages: Array.from({ length: STAGES }, (_, i) => ({
        name: `s${i}`,
        needs: i ? [`s${i - 1}`] : [],
        resources: { cpu: '100m', memory: '16Mi' },
        command: ['sh', '-c', STAMP],
      })),
    };
    const r = await submit(g.url, chain);
    const job = await until('chain ends', () => jobOf(g.url, r.body.id), isTerminal, 600_000);
    if (job.state !== 'succeeded') throw new Error(`chain ${job.state}: ${job.failureReason}`);
    const events = (await api(g.url, `/v1/jobs/${job.id}/events?limit=5000`)).body.events as { type: string; stageName: string; at: number }[];
    const readyAt = new Map<string, number>();
    // s0 is ready at submission; the others at their stage:ready event.
    readyAt.set('s0', job.createdAt);
    for (const e of events) if (e.type === 'stage:ready') readyAt.set(e.stageName, e.at);
    const lat: number[] = [];
    for (const s of job.stages) {
      const started = Number((await api(g.url, `/v1/jobs/${job.id}/stages/${s.name}/outputs/t`)).body) / 1000;
      lat.push(started - readyAt.get(s.name)!);
    }
    const floor = await spawnFloor(STAGES);
    // The peer, in the same run: BullMQ on the local Redis, when one answers.
    let bullmq: number[] | null = null;
    try {
      bullmq = await bullmqStartLatency(STAGES);
    } catch (err) {
      console.warn(`BullMQ peer skipped: ${(err as Error).message}`);
    }

    const report = {
      machine: `${process.platform} ${process.arch}, ${(await import('node:os')).cpus().length} cores, Node ${process.version}`,
      examplePipeline: { runs: e2e.length, medianMs: median(e2e), allMs: e2e },
      readyToStart: { stages: lat.length, medianMs: +median(lat).toFixed(1), p90Ms: +pct(lat, 90).toFixed(1), maxMs: +Math.max(...lat).toFixed(1) },
      directSpawnFloor: { runs: floor.length, medianMs: +median(floor).toFixed(1) },
      ratioToFloor: +(median(lat) / median(floor)).toFixed(1),
      bullmqEnqueueToStart: bullmq ? { runs: bullmq.length, medianMs: +median(bullmq).toFixed(1), p90Ms: +pct(bullmq, 90).toFixed(1) } : 'skipped: no Redis',
      ratioToBullmq: bullmq ? +(median(lat) / median(bullmq)).toFixed(1) : null,
    };
    console.log(JSON.stringify(report, null, 2));
  } finally {
    await g.stop();
  }
}

await main();

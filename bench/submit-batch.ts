/**
 * The throughput issue's submit target: 10,000 three-stage jobs accepted in one batch in ≤ 5 s.
 *
 * Starts the built `gantry server` (dist/, SQLite with synchronous=FULL, no agents) on a fresh data
 * directory, then POSTs `--runs` batches of `--jobs` jobs to `/v1/jobs/batch` one after another
 * and times each request: body sent, every spec validated, every row written and committed,
 * answer read. The first batch lands on an empty database and a cold process; later ones on a
 * database that holds the earlier batches. Building and stringifying the body is timed apart.
 *
 * Usage: npm run bench:submit [-- --jobs 10000 --runs 5 --out FILE (default bench/results/submit-batch.md; '' only prints)]
 *        GANTRY_BENCH_PROF=DIR also writes the server's CPU profile (node --cpu-prof) there.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { CLI, REPO } from '../test/support/gantry-process.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const argv = process.argv.slice(2);
const arg = (name: string, def: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1]! : def;
};
const JOBS = Number(arg('jobs', '10000'));
const RUNS = Number(arg('runs', '5'));
const OUT = arg('out', 'bench/results/submit-batch.md');
const TARGET_MS = 5000;

/** preprocess on CPUs, train on a GPU, evaluate on CPUs: the job the README shows, 3 stages. */
const spec = (i: number) => ({
  name: `bench-${i}`,
  team: `team-${i % 10}`,
  labels: { bench: 'submit-batch' },
  stages: [
    { name: 'preprocess', resources: { cpu: 2, memory: '2Gi' }, command: ['sh', '-c', 'echo data > $GANTRY_OUTPUT_DIR/data.txt'] },
    {
      name: 'train',
      needs: ['preprocess'],
      resources: { cpu: 4, memory: '8Gi', gpu: { count: 1, type: 'h100' } },
      env: { SEED: String(i), EPOCHS: '3' },
      timeoutSeconds: 3600,
      command: ['python3', 'train.py', `--seed=${i}`],
    },
    {
      name: 'evaluate',
      needs: ['train'],
      resources: { cpu: 1, memory: '1Gi' },
      retry: { maxAttempts: 1 },
      command: ['sh', '-c', 'cat $GANTRY_INPUT_DIR/train/model.bin'],
    },
  ],
});

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function startServer(dataDir: string): Promise<{ url: string; token: string; stop: () => Promise<void> }> {
  const prof = process.env.GANTRY_BENCH_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.GANTRY_BENCH_PROF}`] : [];
  const proc = spawn(process.execPath, [...prof, CLI, 'server', '--data-dir', dataDir, '--port', '0', '--json'], {
    cwd: REPO,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stderr.on('data', (d) => (out = (out + d).slice(-20_000)));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gantry server did not start in 20 s:\n${out}`)), 20_000);
    proc.on('exit', (code) => reject(new Error(`gantry server exited with ${code}:\n${out}`)));
    // Its log is JSON lines on stdout too; the line with `url` and `dataDir` says it is listening.
    proc.stdout.on('data', (d) => {
      out = (out + d).slice(-20_000);
      const m = /\{"url":"([^"]+)","dataDir"/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
  });
  return {
    url,
    token: readFileSync(join(dataDir, 'admin.token'), 'utf8').trim(),
    async stop() {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
      if (proc.exitCode === null) proc.kill('SIGKILL');
    },
  };
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-bench-submit-'));
  const server = await startServer(dataDir);
  const rows: { run: number; ms: number; bodyMiB: number; buildMs: number }[] = [];
  try {
    for (let run = 1; run <= RUNS; run++) {
      const t0 = performance.now();
      const body = JSON.stringify({ jobs: Array.from({ length: JOBS }, (_, i) => spec(i)) });
      const buildMs = performance.now() - t0;
      const t1 = performance.now();
      const res = await fetch(`${server.url}/v1/jobs/batch`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${server.token}` },
        body,
      });
      const answer = (await res.json()) as { jobs?: { id: string }[]; message?: string };
      const ms = performance.now() - t1;
      if (res.status !== 201 || answer.jobs?.length !== JOBS) throw new Error(`batch ${run}: HTTP ${res.status}: ${answer.message ?? 'wrong answer'}`);
      rows.push({ run, ms, bodyMiB: Buffer.byteLength(body) / 2 ** 20, buildMs });
      process.stderr.write(`batch ${run}/${RUNS}: ${JOBS} jobs in ${ms.toFixed(0)} ms\n`);
    }
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }

  const times = rows.map((r) => r.ms);
  const lines = [
    `# batch submit: ${JOBS} three-stage jobs in one POST /v1/jobs/batch`,
    '',
    `${new Date().toISOString().slice(0, 10)}, ${process.platform} ${process.arch}, ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), Node ${process.version};`,
    `built \`gantry server\`, SQLite synchronous=${process.env.GANTRY_SQLITE_SYNC ?? 'FULL'}, no agents; body ${rows[0]?.bodyMiB.toFixed(1)} MiB.`,
    '',
    '| batch | jobs already stored | request (ms) | body built and stringified (ms) |',
    '| --- | --- | --- | --- |',
    ...rows.map((r) => `| ${r.run} | ${(r.run - 1) * JOBS} | **${r.ms.toFixed(0)}** | ${r.buildMs.toFixed(0)} |`),
    '',
    `Median ${median(times).toFixed(0)} ms, worst ${Math.max(...times).toFixed(0)} ms; target ≤ ${TARGET_MS} ms: ${Math.max(...times) <= TARGET_MS ? 'met' : 'NOT met'}.`,
  ];
  const text = lines.join('\n') + '\n';
  process.stdout.write(text);
  if (OUT) writeFileSync(resolve(REPO, OUT), text);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

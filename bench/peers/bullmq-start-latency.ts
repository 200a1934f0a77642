/**
 * The peer for bench/ready-to-start.ts: BullMQ on the local Redis, measured the same way.
 * A job is added when the previous one's process has run (a chain, like Gantry's); the worker
 * spawns the same `sh` command in its own process group and the process writes its start time.
 * Latency = the process's start time − the time just before `queue.add`.
 *
 * Not the same work, and the note says so: BullMQ's worker is in-process with no agent hop, no
 * durable SQL commit with fsync, no placement, no fencing; Gantry does all of those per stage.
 */
import { spawn } from 'node:child_process';
import { Queue, Worker } from 'bullmq';

export async function bullmqStartLatency(n: number, connection = { host: '127.0.0.1', port: 6379 }): Promise<number[]> {
  const name = `gantry-bench-${process.pid}-${Date.now()}`;
  const queue = new Queue(name, { connection });
  const started = new Map<string, number>();
  const waiters = new Map<string, () => void>();
  const worker = new Worker(
    name,
    async (job) => {
      const child = spawn('sh', ['-c', 'echo $(($(date +%s%N) / 1000))'], { detached: true, stdio: ['ignore', 'pipe', 'ignore'] });
      let text = '';
      child.stdout.on('data', (d) => (text += d));
      await new Promise((r) => child.on('close', r));
      started.set(job.id!, Number(text.trim()) / 1000);
      waiters.get(job.id!)?.();
    },
    { connection, concurrency: 1 },
  );
  await worker.waitUntilReady();
  const out: number[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const id = `j${i}`;
      const done = new Promise<void>((r) => waiters.set(id, r));
      const t0 = performance.timeOrigin + performance.now();
      await queue.add('stage', { i }, { jobId: id, removeOnComplete: true });
      await done;
      out.push(started.get(id)! - t0);
    }
  } finally {
    await worker.close();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
  }
  return out;
}

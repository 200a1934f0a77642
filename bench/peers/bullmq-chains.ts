/**
 * The BullMQ peer for bench/throughput.ts: the chain workload of ./chain-workload.ts on the local
 * Redis (127.0.0.1:6379). Usage: node --import tsx bench/peers/bullmq-chains.ts --chains N
 *
 * The dependency is BullMQ's own: one FlowProducer flow per chain, C the parent of B the parent
 * of A, so A runs first and Redis moves B (then C) to `wait` in the same script that completes its
 * child, which is what BullMQ offers for dependent jobs. That script RPUSHes the parent onto the
 * wait list while workers take from the same (right) end, where plain adds LPUSH: a promoted B
 * jumps the B backlog, so the oldest Bs wait longest and "B waits after A" has a p99 near the
 * wall time whenever Bs queue up (checked: the first chains' Bs started last). Three queues, one
 * per stage, each with one Worker at concurrency 10 (30 handlers in all, Gantry's agent has 30
 * slots); workers and producer are in this process, with no agent hop, no durable commit (Redis
 * as configured, usually no fsync per write) and no placement.
 *
 * Server CPU is redis-server's own (its pid from INFO, checked against /proc); queues are named per
 * run and obliterated at the end. No Redis: a `skipped` line and exit 0.
 */
import { createRequire } from 'node:module';
import { FlowProducer, Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { BWaits, chainsArg, consoleToStderr, exitIfStuck, Finish, HANDLERS_PER_STAGE, report, runStage, submitAll, timeoutMs } from './chain-workload.js';
import { machineCpuMs, pidsOfCommand, processCpuMs } from './proc-cpu.js';

consoleToStderr();
const PEER = `bullmq ${(createRequire(import.meta.url)('bullmq/package.json') as { version: string }).version}`;
const connection = { host: '127.0.0.1', port: 6379 };
const STAGES = ['a', 'b', 'c'] as const;
type Stage = (typeof STAGES)[number];

/** redis-server's pid, or why there is no Redis to bench against. */
async function findRedis(): Promise<{ pid: number | null } | { skipped: string }> {
  const probe = new Redis({ ...connection, lazyConnect: true, connectTimeout: 2000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  let cause: Error | null = null; // ioredis rejects connect() with 'Connection is closed.'; the why is here
  probe.on('error', (err: Error) => (cause = err));
  try {
    await probe.connect();
    const pid = Number(/process_id:(\d+)/.exec(await probe.info('server'))?.[1]);
    // INFO's pid is only ours to read if Redis runs in this pid namespace (not in a container).
    if (pidsOfCommand('redis-server').includes(pid)) return { pid };
    const local = pidsOfCommand('redis-server');
    return { pid: local.length === 1 ? local[0]! : null };
  } catch (err) {
    return { skipped: `no Redis at ${connection.host}:${connection.port}: ${(cause ?? (err as Error)).message}` };
  } finally {
    probe.disconnect();
  }
}

async function main(n: number): Promise<void> {
  const redis = await findRedis();
  if ('skipped' in redis) return report({ peer: PEER, chains: n, skipped: redis.skipped });
  if (redis.pid === null) console.error('redis-server not found in /proc: cpuMs.server will be null');

  const tag = `gantry-bench-${process.pid}-${Date.now()}`;
  const queueName = (s: Stage) => `${tag}-${s}`;
  const waits = new BWaits(n);
  const finish = new Finish(n, timeoutMs());
  const workers = STAGES.map(
    (stage) =>
      new Worker(
        queueName(stage),
        async (job: Job<{ chain: number }>) => {
          if (stage === 'b') waits.bStart(job.data.chain);
          await runStage();
          if (stage === 'a') waits.aEnd(job.data.chain);
        },
        { connection, concurrency: HANDLERS_PER_STAGE },
      ),
  );
  for (const w of workers) {
    w.on('failed', (job, err) => finish.fail(new Error(`${w.name} job ${job?.id} failed: ${err.message}`)));
    w.on('error', (err) => console.error(`${w.name}: ${err.message}`));
  }
  // 'completed' fires once the job is recorded as completed in Redis.
  workers[2]!.on('completed', () => finish.count());
  const flow = new FlowProducer({ connection });
  flow.on('error', (err) => console.error(`flow producer: ${err.message}`));

  try {
    await Promise.all([...workers.map((w) => w.waitUntilReady()), flow.waitUntilReady()]);
    const srv0 = redis.pid === null ? null : processCpuMs(redis.pid);
    const cpu0 = process.cpuUsage();
    const machine0 = machineCpuMs();
    const t0 = performance.now();
    const submitted = submitAll(n, (chain) => {
      const data = { chain };
      return flow.add({
        name: 'c',
        queueName: queueName('c'),
        data,
        children: [{ name: 'b', queueName: queueName('b'), data, children: [{ name: 'a', queueName: queueName('a'), data }] }],
      });
    });
    await Promise.race([submitted, finish.promise]);
    const submitMs = performance.now() - t0;
    await finish.promise;
    const wallMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const machine1 = machineCpuMs();
    const srv1 = redis.pid === null ? null : processCpuMs(redis.pid);
    const { p50, p99 } = waits.percentiles();
    report({
      peer: PEER,
      chains: n,
      submitMs,
      wallMs,
      chainsPerSec: n / (wallMs / 1000),
      bWaitP50Ms: p50,
      bWaitP99Ms: p99,
      cpuMs: { client: (cpu.user + cpu.system) / 1000, server: srv0 === null || srv1 === null ? NaN : srv1 - srv0 },
      machineCpuMs: machine0 === null || machine1 === null ? null : machine1 - machine0,
    });
  } finally {
    finish.stop();
    // Cleanup failures go to stderr: the result line is already out, or an error is on its way.
    const warn = (what: string) => (err: Error) => console.error(`${what}: ${err.message}`);
    await Promise.all(workers.map((w) => w.close().catch(warn(`close ${w.name}`))));
    await flow.close().catch(warn('close flow producer'));
    for (const stage of STAGES) {
      const q = new Queue(queueName(stage), { connection });
      await q.obliterate({ force: true }).catch(warn(`obliterate ${q.name}`));
      await q.close().catch(warn(`close ${q.name}`));
    }
  }
}

let chains = 0;
try {
  chains = chainsArg();
  await main(chains);
} catch (err) {
  report({ peer: PEER, chains, error: (err as Error).message });
}
exitIfStuck();

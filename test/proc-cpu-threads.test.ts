import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { processCpuMs, threadsCpuMs } from '../bench/peers/proc-cpu.js';

/** Keeps the calling thread busy for `ms` of wall time. */
function spin(ms: number): void {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    /* busy */
  }
}

// The throughput bench splits the server's CPU by thread (docs/throughput.md, "The server's CPU a
// stage on PostgreSQL, by thread"): what another thread burns must land in `others`, what the main
// thread burns in `mainUser`, and the parts must add up to the process's total.
describe.runIf(process.platform === 'linux')('threadsCpuMs', () => {
  it("splits this process's CPU between its main thread and the others", async () => {
    const before = threadsCpuMs(process.pid)!;
    // A worker thread spins 400 ms while the main thread waits for it.
    await new Promise<void>((resolve, reject) => {
      const w = new Worker('const end = Date.now() + 400; while (Date.now() < end) {}', { eval: true });
      w.once('exit', () => resolve());
      w.once('error', reject);
    });
    const afterWorker = threadsCpuMs(process.pid)!;
    spin(400);
    const afterMain = threadsCpuMs(process.pid)!;

    // The worker's spin is the other threads' (less than its wall time on a busy machine, so a third of it is asked).
    expect(afterWorker.others - before.others).toBeGreaterThanOrEqual(130);
    expect(afterWorker.mainUser - before.mainUser).toBeLessThan(afterWorker.others - before.others);
    // The main thread's spin is its own user time.
    expect(afterMain.mainUser - afterWorker.mainUser).toBeGreaterThanOrEqual(130);
    expect(afterMain.others - afterWorker.others).toBeLessThan(afterMain.mainUser - afterWorker.mainUser);
    // The parts are the whole, to a clock tick or two (the total is read a moment later).
    const total = processCpuMs(process.pid)!;
    expect(total - (afterMain.mainUser + afterMain.mainSystem + afterMain.others)).toBeGreaterThanOrEqual(0);
    expect(total - (afterMain.mainUser + afterMain.mainSystem + afterMain.others)).toBeLessThanOrEqual(50);
  });

  it('answers null for a process that is gone', () => {
    expect(threadsCpuMs(2 ** 22 + 12345)).toBeNull();
  });
});

import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { isTerminal, jobOf, type RunningGantry, startGantryUp, submit, until } from '../support/gantry-process.js';

/** Processes whose command line mentions this data directory (gantry up, its agents). */
function processesUsing(dir: string): string[] {
  try {
    return execFileSync('pgrep', ['-f', dir], { encoding: 'utf8' }).trim().split('\n').filter(Boolean);
  } catch {
    return [];
  }
}

describe('gantry up killed with SIGKILL and restarted on the same data directory', () => {
  let first: RunningGantry | undefined;
  let second: RunningGantry | undefined;
  afterAll(async () => {
    await second?.stop();
    if (first) rmSync(first.dataDir, { recursive: true, force: true });
  });

  it('takes its agents down with it, and the restarted system finishes every job', async () => {
    first = await startGantryUp({ env: { GANTRY_KILL_GRACE_MS: '1000' } });
    const r = await submit(first.url, {
      name: 'survives-restart',
      stages: [
        {
          name: 'slow',
          resources: { cpu: 1, memory: '64Mi' },
          command: ['sh', '-c', 'sleep 3; echo "attempt $GANTRY_ATTEMPT" > "$GANTRY_OUTPUT_DIR/out.txt"'],
        },
        { name: 'after', needs: ['slow'], resources: { cpu: 1, memory: '64Mi' }, command: ['sh', '-c', 'cat "$GANTRY_INPUT_DIR/slow/out.txt"'] },
      ],
    });
    expect(r.status).toBe(201);
    await until(
      'slow running',
      () => jobOf(first!.url, r.body.id),
      (j) => j.stages[0].state === 'running',
    );

    first.proc.kill('SIGKILL');
    // The local agents see their parent gone (stdin closed) and stop, killing what they ran.
    await until(
      'agents gone',
      async () => processesUsing(first!.dataDir),
      (ps) => ps.length === 0,
      15_000,
    ).catch((err) => {
      const ps = processesUsing(first!.dataDir);
      const detail = ps.length ? execFileSync('ps', ['-o', 'pid,ppid,stat,etime,args', '-p', ps.join(',')], { encoding: 'utf8' }) : '';
      throw new Error(`${(err as Error).message}\n${detail}\n${first!.output().slice(-3000)}`);
    });

    second = await startGantryUp({ dataDir: first.dataDir, env: { GANTRY_KILL_GRACE_MS: '1000' } });
    const job = await until('job ends after restart', () => jobOf(second!.url, r.body.id), isTerminal, 60_000);
    expect(job.state).toBe('succeeded');
    const slow = job.stages[0];
    expect(slow.attempts.map((a: { state: string }) => a.state)).toEqual(['lost', 'succeeded']);
    expect(slow.attemptsUsed).toBe(0); // the lost attempt did not use up a retry
    expect(slow.lostUsed).toBe(1);
  }, 120_000);
});

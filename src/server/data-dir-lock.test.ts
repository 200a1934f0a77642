import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { lockDataDir } from './data-dir-lock.js';

/** A separate process holding the lock, as another server would. */
function holder(dir: string): Promise<{ kill(): Promise<void>; pid: number }> {
  const script = join(dir, 'hold.mts');
  writeFileSync(
    script,
    `import { lockDataDir } from ${JSON.stringify(join(import.meta.dirname, 'data-dir-lock.ts'))};\nlockDataDir(${JSON.stringify(dir)});\nconsole.log('locked');\nsetInterval(() => {}, 1000);\n`,
  );
  const p = spawn(process.execPath, ['--import', 'tsx', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    p.stdout.on('data', (d) => {
      if (String(d).includes('locked')) resolve({ pid: p.pid!, kill: () => new Promise((r) => (p.once('exit', () => r()), p.kill('SIGKILL'))) });
    });
    p.once('exit', (code) => reject(new Error(`holder exited with ${code}`)));
  });
}

describe('lockDataDir', () => {
  it('refuses a directory another process holds, naming it; is free the moment that process is SIGKILLed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gantry-lock-'));
    const other = await holder(dir);
    expect(() => lockDataDir(dir, { waitMs: 200 })).toThrow(new RegExp(`in use by process ${other.pid}`));
    await other.kill();
    const unlock = lockDataDir(dir, { waitMs: 0 });
    expect(readFileSync(join(dir, 'server.pid'), 'utf8')).toBe(String(process.pid));
    // Held by this process now: a second lock is refused too (SQLite locks per connection).
    expect(() => lockDataDir(dir, { waitMs: 0 })).toThrow(/in use by process/);
    unlock();
    lockDataDir(dir, { waitMs: 0 })();
  });

  it('waits a little for a holder that is going away', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gantry-lock-'));
    const other = await holder(dir);
    // Killed from outside in 200 ms: the lock call blocks this process while it waits.
    spawn('sh', ['-c', `sleep 0.2; kill -9 ${other.pid}`], { stdio: 'ignore' });
    const unlock = lockDataDir(dir, { waitMs: 5000 });
    unlock();
  });
});

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CLI, REPO } from '../support/gantry-process.js';

/**
 * A supervisor (systemd Restart=always, Kubernetes) restarts a killed server at once. The data
 * directory's lock is released by the kernel with the dead process's files, so the new server
 * must come up every time, not find the directory "in use" by a process still being torn down.
 */
describe('server SIGKILLed and restarted at once, in a tight loop', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-restart-loop-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('comes up 30 times out of 30', async () => {
    const failures: string[] = [];
    for (let i = 0; i < 30; i++) {
      const p = spawn(process.execPath, [CLI, 'server', '--data-dir', dir, '--port', '0', '--json'], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', (d) => (out += d));
      p.stderr.on('data', (d) => (out += d));
      const up = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), 20_000);
        p.stdout.on('data', () => {
          if (out.includes('"url"')) {
            clearTimeout(timer);
            resolve(true);
          }
        });
        p.once('exit', () => {
          clearTimeout(timer);
          resolve(false);
        });
      });
      if (!up) failures.push(`cycle ${i}: ${out.slice(-500)}`);
      // No wait for the exit: the next one starts while the kernel tears this one down.
      p.kill('SIGKILL');
    }
    expect(failures).toEqual([]);
  }, 300_000); // a start takes seconds on a loaded machine
});

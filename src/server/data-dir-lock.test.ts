import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { lockDataDir } from './data-dir-lock.js';

describe('lockDataDir', () => {
  it('refuses a directory a live process holds, takes over one a dead process left, and unlocks', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gantry-lock-'));
    const other = spawn('sleep', ['30']);
    writeFileSync(join(dir, 'server.pid'), String(other.pid));
    expect(() => lockDataDir(dir)).toThrow(/in use by process/);
    other.kill('SIGKILL');
    await new Promise((r) => other.once('exit', r));
    const unlock = lockDataDir(dir);
    expect(readFileSync(join(dir, 'server.pid'), 'utf8')).toBe(String(process.pid));
    expect(() => lockDataDir(dir)).toThrow(/in use|another Gantry/);
    unlock();
    lockDataDir(dir)();
  });
});

import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseProgressTail, ProgressFile } from './stage-progress.js';

describe('stage progress', () => {
  it('takes the last well-formed line, clamps the fraction, cuts long messages', () => {
    expect(parseProgressTail('{"progress": 0.1}\n{"progress": 0.42, "message": "epoch 3/10"}\n{"progr')).toEqual({ fraction: 0.42, message: 'epoch 3/10' });
    expect(parseProgressTail('{"progress": 7}\n')).toEqual({ fraction: 1 });
    expect(parseProgressTail('not json\n{"message": "no number"}\n')).toBeNull();
    expect(parseProgressTail(`{"progress": 0.5, "message": "${'x'.repeat(500)}"}`)!.message).toHaveLength(200);
  });

  it('answers only news, and looks no more often than it is told', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'progress-'));
    try {
      const file = join(dir, 'progress.jsonl');
      let now = 0;
      const p = new ProgressFile(file, 1000, () => now);
      writeFileSync(file, '{"progress": 0.1}\n');
      expect(await p.changed()).toBeNull(); // not a second since the start: not looked at
      now += 1000;
      rmSync(file);
      expect(await p.changed()).toBeNull(); // no file
      writeFileSync(file, '{"progress": 0.25}\n');
      expect(await p.changed()).toBeNull(); // looked 0 ms ago
      now += 1000;
      expect(await p.changed()).toEqual({ fraction: 0.25 });
      now += 1000;
      expect(await p.changed()).toBeNull(); // unchanged
      appendFileSync(file, '{"progress": 0.25}\n{"progress": 0.5, "message": "half"}\n');
      now += 1000;
      expect(await p.changed()).toEqual({ fraction: 0.5, message: 'half' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('never follows a link the stage put in its place, nor opens a FIFO', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'progress-'));
    try {
      const secret = join(dir, 'credential');
      writeFileSync(secret, '{"progress": 0.99, "message": "gantry_secret_token"}\n', { mode: 0o600 });
      const file = join(dir, 'progress.jsonl');
      symlinkSync(secret, file);
      let now = 0;
      const p = new ProgressFile(file, 1000, () => now);
      now += 1000;
      expect(await p.changed()).toBeNull();
      rmSync(file);
      // Opened for reading, a FIFO with no writer would hold the agent's thread pool forever.
      execFileSync('mkfifo', [file]);
      now += 1000;
      expect(await p.changed()).toBeNull();
      rmSync(file);
      writeFileSync(file, '{"progress": 0.3}\n');
      now += 1000;
      expect(await p.changed()).toEqual({ fraction: 0.3 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * An attempt's directories given to its user before its command starts (attempt-owner.ts): as
 * root, on a real file system. What a spare or a crash left there is taken over without following
 * a link.
 */
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentState } from './agent-state.js';
import { openAttemptTo } from './attempt-owner.js';

const root = process.getuid?.() === 0;
const USER = { uid: 61184, gid: 61184, name: 'gantry-61184' };
let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'gantry-owner-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!root)('openAttemptTo', () => {
  it('gives work/, output/, input/ with what is in it, and a new progress file to the user, and opens the directory to pass', () => {
    const p = new AgentState(dir).paths('att_1');
    for (const d of [p.work, p.output, join(p.input, 'up')]) mkdirSync(d, { recursive: true, mode: 0o700 });
    writeFileSync(join(p.input, 'up', 'data.bin'), 'downloaded');
    openAttemptTo(p, USER);
    for (const d of [p.work, p.output, p.input, join(p.input, 'up'), join(p.input, 'up', 'data.bin'), p.progress]) {
      const st = statSync(d);
      expect([st.uid, st.gid], d).toEqual([USER.uid, USER.gid]);
    }
    for (const d of [p.work, p.output, p.input]) expect(statSync(d).mode & 0o7777, d).toBe(0o700);
    expect(statSync(p.progress).mode & 0o7777).toBe(0o600);
    expect(statSync(p.dir).mode & 0o7777).toBe(0o711);
  });

  it('a progress file left in its place (a link, by a crash or a stage) is replaced, and what the link names is untouched', () => {
    const p = new AgentState(dir).paths('att_2');
    for (const d of [p.work, p.output, p.input]) mkdirSync(d, { recursive: true, mode: 0o700 });
    const secret = join(dir, 'secret');
    writeFileSync(secret, 'root only', { mode: 0o600 });
    symlinkSync(secret, p.progress);
    openAttemptTo(p, USER);
    const st = lstatSync(p.progress);
    expect(st.isFile()).toBe(true);
    expect([st.uid, st.size]).toEqual([USER.uid, 0]);
    expect([statSync(secret).uid, readFileSync(secret, 'utf8')]).toEqual([0, 'root only']);
  });
});

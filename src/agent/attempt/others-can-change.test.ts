import { chmodSync, chownSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { othersCanChange } from './others-can-change.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-others-'));
});
afterEach(() => rm(dir, { recursive: true, force: true }));
const uid = process.geteuid?.() ?? 0;

it('a private directory, a file in it, and a path not made yet under it: nobody else can change them', () => {
  writeFileSync(join(dir, 'f'), 'x');
  expect(othersCanChange(dir)).toBeNull();
  expect(othersCanChange(join(dir, 'f'))).toBeNull();
  expect(othersCanChange(join(dir, 'not', 'yet'))).toBeNull();
});

it('a component writable by its group or by others is named, whatever lies under it', () => {
  mkdirSync(join(dir, 'open', 'launcher'), { recursive: true });
  chmodSync(join(dir, 'open'), 0o777);
  expect(othersCanChange(join(dir, 'open', 'launcher', 'bin'))).toBe(`${join(dir, 'open')} is writable by its group (mode 777)`);
  chmodSync(join(dir, 'open'), 0o703);
  expect(othersCanChange(join(dir, 'open', 'launcher'))).toBe(`${join(dir, 'open')} is writable by others (mode 703)`);
  // Sticky, as /tmp: others cannot rename or remove what is ours in it.
  chmodSync(join(dir, 'open'), 0o1777);
  expect(othersCanChange(join(dir, 'open', 'launcher'))).toBeNull();
});

it('a symbolic link is followed: its target is checked as the path itself', () => {
  mkdirSync(join(dir, 'private'));
  mkdirSync(join(dir, 'open'));
  chmodSync(join(dir, 'open'), 0o777);
  symlinkSync(join(dir, 'private'), join(dir, 'to-private'));
  symlinkSync(join(dir, 'open'), join(dir, 'to-open'));
  expect(othersCanChange(join(dir, 'to-private', 'bin'))).toBeNull();
  expect(othersCanChange(join(dir, 'to-open', 'bin'))).toMatch(/open is writable by its group/);
  symlinkSync(join(dir, 'nowhere'), join(dir, 'dangling'));
  expect(othersCanChange(join(dir, 'dangling', 'bin'))).toMatch(/dangling is a symbolic link that does not resolve/);
});

it.skipIf(uid !== 0)("a component of another user's is named (as root: a user's home the agent was started in)", () => {
  mkdirSync(join(dir, 'alice'));
  chownSync(join(dir, 'alice'), 4321, 4321);
  expect(othersCanChange(join(dir, 'alice', '.gantry-agent-a', 'launcher'))).toBe(
    `${join(dir, 'alice')} belongs to uid 4321, not to root or to this agent's user (uid 0)`,
  );
});

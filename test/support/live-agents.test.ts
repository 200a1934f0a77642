import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { instanceOf } from '../../src/agent/contain/agent-cgroups.js';
import { leftovers } from './cgroup-leftovers.js';
import { liveAgentInstances } from './live-agents.js';

// The test teardown's sweep of agents' cgroup subtrees (cgroup-leftovers.ts) must leave a running
// agent's alone: here a process whose command line is an agent's (it only waits).
describe('the cgroup teardown and running agents', () => {
  const kids: ReturnType<typeof spawn>[] = [];
  const dirs: string[] = [];
  afterEach(() => {
    for (const k of kids.splice(0)) k.kill('SIGKILL');
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const agentLike = (cwd: string, args: string[]) => {
    const k = spawn(
      process.execPath,
      ['-e', 'setInterval(() => {}, 1000)', '/opt/gantry/dist/cli/main.js', 'agent', '--server', 'http://127.0.0.1:1', ...args],
      {
        cwd,
        stdio: 'ignore',
      },
    );
    kids.push(k);
    return k;
  };
  const until = async (f: () => boolean) => {
    for (let i = 0; i < 100 && !f(); i++) await new Promise((r) => setTimeout(r, 20));
  };

  it('finds an agent by its data directory, relative to its working directory or given with =', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'gantry-live-'));
    dirs.push(cwd);
    agentLike(cwd, ['--name', 'n1', '--data-dir', 'a1']);
    agentLike(cwd, ['--data-dir=/tmp/somewhere/a2']);
    const want = [instanceOf(join(cwd, 'a1')), instanceOf('/tmp/somewhere/a2')];
    await until(() => want.every((i) => liveAgentInstances().instances.has(i)));
    expect(want.filter((i) => liveAgentInstances().instances.has(i))).toEqual(want);
  });

  it("spares a running agent's subtree, removes a dead one's, and removes none while an agent's cannot be told", () => {
    const live = instanceOf('/data/live');
    const dead = instanceOf('/data/dead');
    const root = '/sys/fs/cgroup/memory';
    const before = new Set([`${root}/gantry-old.${dead}`]);
    const now = [`${root}/gantry-old.${dead}`, `${root}/gantry-w1.${live}`, `${root}/gantry-w.2.${dead}`, `/sys/fs/cgroup/pids/gantry-w1.${live}`];
    expect(leftovers(before, now, { instances: new Set([live]), unnamed: [] })).toEqual([`${root}/gantry-w.2.${dead}`]);
    expect(leftovers(before, now, { instances: new Set(), unnamed: [] })).toEqual(now.slice(1));
    expect(leftovers(before, now, { instances: new Set(), unnamed: [4242] })).toEqual([]);
  });

  it('counts an agent with no data directory on its command line as one it cannot tell', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'gantry-live-'));
    dirs.push(cwd);
    const k = agentLike(cwd, ['--name', 'n3']);
    await until(() => liveAgentInstances().unnamed.includes(k.pid!));
    expect(liveAgentInstances().unnamed).toContain(k.pid);
    k.kill('SIGKILL');
  });
});

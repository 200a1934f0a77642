import { afterEach, describe, expect, it } from 'vitest';
import { fakeCgroupHost, FAKE_V1_OWN, FAKE_V2_OWN, type FakeCgroupHost } from '../../../test/support/fake-cgroup-host.js';
import { chooseCgroups, detectCgroups } from './detect-cgroups.js';

let host: FakeCgroupHost | null = null;
afterEach(() => {
  host?.cleanup();
  host = null;
});

describe('detectCgroups', () => {
  it('pure v2: every controller from the unified hierarchy, the kill by cgroup.kill, devices not restricted', () => {
    host = fakeCgroupHost('v2');
    const d = detectCgroups(host.root);
    expect(d.problems).toEqual([]);
    expect(d.v2).toMatchObject({ mount: host.at('sys/fs/cgroup'), own: host.at(`sys/fs/cgroup${FAKE_V2_OWN}`), ownIsRoot: false, kill: true });
    expect([...d.v2!.controllers].sort()).toEqual(['cpu', 'memory', 'pids']);
    expect(d.v1.size).toBe(0);
    expect(d.choice).toMatchObject({ mechanism: 'cgroup-v2', memory: 'v2', cpu: 'v2', pids: 'v2', devices: false, kill: 'cgroup.kill', v2: true });
    expect(d.choice.problems).toEqual([expect.stringMatching(/^devices are not restricted: cgroup v2 would need an eBPF program/)]);
  });

  it('pure v1: every controller from its hierarchy (cpu and cpuacct co-mounted share one), the kill by the freezer', () => {
    host = fakeCgroupHost('v1');
    const d = detectCgroups(host.root);
    expect(d.problems).toEqual([]);
    expect(d.v2).toBeNull();
    expect(d.v1.get('memory')).toEqual({ mount: host.at('sys/fs/cgroup/memory'), own: host.at(`sys/fs/cgroup/memory${FAKE_V1_OWN}`), controllers: ['memory'] });
    expect(d.v1.get('cpu')).toBe(d.v1.get('cpuacct'));
    expect(d.v1.get('cpu')).toMatchObject({ own: host.at(`sys/fs/cgroup/cpu,cpuacct${FAKE_V1_OWN}`), controllers: ['cpu', 'cpuacct'] });
    // name=systemd and blkio are not the agent's.
    expect([...d.v1.keys()].sort()).toEqual(['cpu', 'cpuacct', 'devices', 'freezer', 'memory', 'pids']);
    expect(d.choice).toMatchObject({ mechanism: 'cgroup-v1', memory: 'v1', cpu: 'v1', pids: 'v1', devices: true, kill: 'freezer', v2: false, problems: [] });
    expect([...d.choice.v1].sort()).toEqual(['cpu', 'cpuacct', 'devices', 'freezer', 'memory', 'pids']);
  });

  it('hybrid (the CI machine): limits from v1, the kill from a v2 hierarchy with no controllers', () => {
    host = fakeCgroupHost('hybrid');
    const d = detectCgroups(host.root);
    expect(d.problems).toEqual([]);
    // The agent sits in the v2 root, which has no cgroup.kill of its own: known once a child is made.
    expect(d.v2).toMatchObject({ own: host.at('sys/fs/cgroup/unified'), ownIsRoot: true, kill: null });
    expect(d.v2!.controllers.size).toBe(0);
    expect(d.choice).toMatchObject({ mechanism: 'cgroup-hybrid', memory: 'v1', cpu: 'v1', pids: 'v1', devices: true, kill: 'cgroup.kill', v2: true });
    // No freezer needed where cgroup.kill kills, no cpuacct where v2's cpu.stat counts CPU time.
    expect([...d.choice.v1].sort()).toEqual(['cpu', 'devices', 'memory', 'pids']);
  });

  it('takes a controller from v2 where v2 offers it, even on a hybrid host', () => {
    host = fakeCgroupHost('hybrid');
    const d = detectCgroups(host.root);
    const choice = chooseCgroups({ v1: d.v1, v2: { ...d.v2!, controllers: new Set(['memory'] as const), kill: true } });
    expect(choice).toMatchObject({ mechanism: 'cgroup-hybrid', memory: 'v2', cpu: 'v1', pids: 'v1' });
    expect(choice.v1.has('memory')).toBe(false);
  });

  it('an agent restarted inside gantry-<machine>/agent (pure v2) finds the cgroup it moved out of', () => {
    host = fakeCgroupHost('v2');
    host.write('proc/self/cgroup', `0::${FAKE_V2_OWN}/gantry-m1/agent\n`);
    expect(detectCgroups(host.root).v2!.own).toBe(host.at(`sys/fs/cgroup${FAKE_V2_OWN}`));
  });

  it('says why where the mount does not show its own cgroup, or it names none', () => {
    host = fakeCgroupHost('v1');
    const mountinfo = [
      '27 1 254:0 / / rw,relatime - ext4 /dev/vda rw',
      // Mounted from inside another container's cgroup: this process's lies outside it.
      '33 31 0:33 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory',
      // A mount point with a space, as mountinfo escapes it.
      '34 31 0:34 / /sys/fs/cgroup/my\\040pids rw,relatime - cgroup cgroup rw,pids',
      '35 31 0:35 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer',
    ];
    host.write('proc/self/mountinfo', mountinfo.join('\n') + '\n');
    host.write('proc/self/cgroup', `4:memory:/system.slice\n3:pids:/system.slice\n`);
    const d = detectCgroups(host.root);
    expect(d.v1.get('pids')?.own).toBe(host.at('sys/fs/cgroup/my pids/system.slice'));
    expect(d.v1.has('memory')).toBe(false);
    expect(d.problems).toEqual([
      expect.stringMatching(
        /^the v1 memory hierarchy is mounted at \/sys\/fs\/cgroup\/memory showing \/docker\/abc, which does not hold this process's cgroup \/system.slice/,
      ),
      expect.stringMatching(/^the v1 freezer hierarchy is mounted at \/sys\/fs\/cgroup\/freezer but .*cgroup names no freezer cgroup of this process$/),
    ]);
    expect(d.choice).toMatchObject({ mechanism: 'cgroup-v1', memory: null, cpu: null, pids: 'v1', kill: 'process-group' });
    expect(d.choice.problems).toEqual([
      expect.stringMatching(/^memory is not limited: no usable cgroup hierarchy has the memory controller$/),
      expect.stringMatching(/^CPU is not weighted nor capped/),
      expect.stringMatching(/^devices are not restricted: no usable v1 devices hierarchy/),
      expect.stringMatching(/^an attempt's processes are killed pid by pid until its cgroups are empty/),
    ]);
  });

  it('no cgroup mounted: nothing enforced, and why', () => {
    host = fakeCgroupHost('v1');
    host.write('proc/self/mountinfo', '27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n');
    const d = detectCgroups(host.root);
    expect(d.choice).toMatchObject({ mechanism: 'none', memory: null, cpu: null, pids: null, devices: false, kill: 'process-group', v2: false });
    expect(d.choice.problems).toHaveLength(5);
    expect(d.choice.problems[4]).toMatch(/killed by its process group: a process that leaves it \(setsid, a daemon\) outlives the attempt/);
  });

  it('a host whose /proc cannot be read contains nothing, and says why', () => {
    host = fakeCgroupHost('v2');
    const d = detectCgroups(host.at('nowhere'));
    expect(d.choice.mechanism).toBe('none');
    expect(d.problems).toEqual([expect.stringMatching(/^cannot read this process's cgroups \(ENOENT.*mountinfo.*\): nothing is contained$/)]);
  });
});

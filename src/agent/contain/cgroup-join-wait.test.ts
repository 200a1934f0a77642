import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { cgroupJoinWait, cgroupJoinWaitHint } from './cgroup-join-wait.js';

/** Real /proc/self/mountinfo lines, each host's cgroup part and a root filesystem. */
const root = '22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro';
// This project's CI host (Linux 6.18): v1 controllers, an empty v2 hierarchy at unified/, no favordynmods.
const hybrid = [
  root,
  '31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755',
  '32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu',
  '35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory',
  '39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids',
  '40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd',
  '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw',
].join('\n');
// systemd on a pure v2 host (Debian 12, Ubuntu 22.04+): no favordynmods, and with it (the kernel prints it after nsdelegate).
const pureV2 = [root, '29 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot'].join('\n');
const pureV2Favoured = pureV2.replace('rw,nsdelegate,memory_recursiveprot', 'rw,nsdelegate,favordynmods,memory_recursiveprot');
// CentOS 7 (Linux 3.10): v1 only.
const v1Only = [
  root,
  '25 18 0:21 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755',
  '26 25 0:22 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd',
  '28 25 0:24 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,memory',
  '31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpu,cpuacct',
].join('\n');
// Ubuntu 20.04's hybrid layout, with the v2 hierarchy remounted with favordynmods by its operator.
const hybridFavoured = [
  root,
  '30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate,favordynmods',
  '34 25 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory',
].join('\n');

describe("cgroupJoinWait: whether a burst's first cgroup join waits for an RCU grace period", () => {
  it('a hybrid host without favordynmods waits, and the v2 mount is where a remount sets it', () => {
    expect(cgroupJoinWait(hybrid)).toEqual({ kind: 'waits', v2Mount: '/sys/fs/cgroup/unified' });
    const hint = cgroupJoinWaitHint(cgroupJoinWait(hybrid))!;
    expect(hint).toMatch(/^the first cgroup join of each burst of stage starts waits for an RCU grace period \(8 ms at the median, 28 at p99, measured\)/);
    expect(hint).toContain('`mount -o remount,favordynmods /sys/fs/cgroup/unified` (Linux 6.0+, until a reboot)');
    expect(hint).toContain('`cgroup_favordynmods=true` (6.7+)');
    expect(hint).toContain("a host-wide trade (every fork and exit on the host takes the lock's slower path)");
    // It fits a report's problem (500 characters) whole.
    expect(hint.length).toBeLessThanOrEqual(500);
  });

  it('a pure v2 host: waits without the option, not with it', () => {
    expect(cgroupJoinWait(pureV2)).toEqual({ kind: 'waits', v2Mount: '/sys/fs/cgroup' });
    expect(cgroupJoinWait(pureV2Favoured)).toEqual({ kind: 'favoured', mount: '/sys/fs/cgroup' });
    expect(cgroupJoinWaitHint(cgroupJoinWait(pureV2Favoured))).toBeNull();
  });

  it('a hybrid host whose v2 hierarchy has it: the lock is one for every hierarchy, so v1 joins do not wait either', () => {
    expect(cgroupJoinWait(hybridFavoured)).toEqual({ kind: 'favoured', mount: '/sys/fs/cgroup/unified' });
  });

  it('a v1-only host waits, and only the kernel command line can set it', () => {
    expect(cgroupJoinWait(v1Only)).toEqual({ kind: 'waits', v2Mount: null });
    const hint = cgroupJoinWaitHint(cgroupJoinWait(v1Only))!;
    expect(hint).toContain('The kernel command line `cgroup_favordynmods=true` (Linux 6.7+; v1 hierarchies take no such option at a remount)');
    expect(hint).not.toContain('remount,favordynmods');
  });

  it("reads the option among the cgroup filesystem's own options, not in a mount point or another filesystem", () => {
    const decoy = [
      root,
      '50 22 0:40 / /mnt/favordynmods rw,relatime - tmpfs favordynmods rw,favordynmods',
      '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw',
    ].join('\n');
    expect(cgroupJoinWait(decoy)).toEqual({ kind: 'waits', v2Mount: '/sys/fs/cgroup/unified' });
  });

  it('no cgroup hierarchy: nothing joins, nothing to say', () => {
    expect(cgroupJoinWait(root + '\n')).toEqual({ kind: 'no-cgroups' });
    expect(cgroupJoinWaitHint({ kind: 'no-cgroups' })).toBeNull();
  });

  it("reads this host's own mountinfo", () => {
    expect(['waits', 'favoured', 'no-cgroups']).toContain(cgroupJoinWait(readFileSync('/proc/self/mountinfo', 'utf8')).kind);
  });
});

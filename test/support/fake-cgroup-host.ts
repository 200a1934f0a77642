/**
 * A host's cgroup layout as files in a temporary directory, for the containment code's `hostRoot`
 * (docs/containment.md): `proc/self/mountinfo`, `proc/self/cgroup`, `proc/devices`, and the
 * hierarchies under `sys/fs/cgroup` with the interface files detection reads. Nothing in it is a
 * real cgroup: what the agent writes there stays a plain file for the test to read.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

export type FakeLayout = 'v2' | 'v1' | 'hybrid';

export interface FakeCgroupHost {
  root: string;
  /** A path under the fake root, e.g. `at('sys/fs/cgroup/memory')`. */
  at(path: string): string;
  write(path: string, text: string): void;
  cleanup(): void;
}

/** Linux 6.x's /proc/devices, trimmed; with NVIDIA's 195 and a dynamic nvidia-uvm major. */
const PROC_DEVICES = `Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  5 /dev/tty
  5 /dev/ptmx
136 pts
195 nvidia-frontend
508 nvidia-uvm

Block devices:
  7 loop
259 blkext
`;

/** Where the agent's own cgroup is in each layout. */
export const FAKE_V2_OWN = '/system.slice/gantry-agent.service';
export const FAKE_V1_OWN = '/system.slice/gantry-agent.service';

/**
 * `v2`: systemd's unified layout, the agent in a delegated service cgroup offering memory, cpu and
 * pids. `v1`: the v1 hierarchies, cpu and cpuacct co-mounted. `hybrid`: v1 hierarchies plus an
 * empty v2 hierarchy at /sys/fs/cgroup/unified (the project's CI machine).
 */
export function fakeCgroupHost(layout: FakeLayout, opts: { pid?: number; v2Controllers?: string } = {}): FakeCgroupHost {
  const root = mkdtempSync(join(tmpdir(), 'gantry-fake-cgroup-'));
  const at = (p: string) => join(root, p);
  const write = (p: string, text: string) => {
    mkdirSync(dirname(at(p)), { recursive: true });
    writeFileSync(at(p), text);
  };
  const pid = opts.pid ?? process.pid;
  const mounts = ['22 27 0:21 / /proc rw,relatime - proc proc rw', '27 1 254:0 / / rw,relatime - ext4 /dev/vda rw'];
  const cgroupLines: string[] = [];
  if (layout === 'v2') {
    mounts.push('31 23 0:28 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot');
    cgroupLines.push(`0::${FAKE_V2_OWN}`);
    const own = `sys/fs/cgroup${FAKE_V2_OWN}`;
    write('sys/fs/cgroup/cgroup.controllers', 'cpuset cpu io memory hugetlb pids rdma misc\n');
    write(`${own}/cgroup.controllers`, opts.v2Controllers ?? 'cpu io memory pids\n');
    write(`${own}/cgroup.type`, 'domain\n');
    write(`${own}/cgroup.kill`, '');
    write(`${own}/cgroup.subtree_control`, '');
    write(`${own}/cgroup.procs`, `${pid}\n`);
  } else {
    mounts.push('31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755');
    const v1: [number, string, string][] = [
      [32, 'cpu,cpuacct', 'rw,cpu,cpuacct'],
      [33, 'memory', 'rw,memory'],
      [34, 'pids', 'rw,pids'],
      [35, 'freezer', 'rw,freezer'],
      [36, 'devices', 'rw,devices'],
      [37, 'blkio', 'rw,blkio'],
      [38, 'systemd', 'rw,xattr,name=systemd'],
    ];
    v1.forEach(([id, dir, options], i) => {
      mounts.push(`${id} 31 0:${id} / /sys/fs/cgroup/${dir} rw,nosuid,nodev,noexec,relatime shared:${i + 9} - cgroup cgroup ${options}`);
      const controllers = options.replace(/^rw,/, '').replace('xattr,', '');
      cgroupLines.push(`${12 - i}:${controllers}:${FAKE_V1_OWN}`);
      write(`sys/fs/cgroup/${dir}${FAKE_V1_OWN}/cgroup.procs`, `${pid}\n`);
    });
    if (layout === 'hybrid') {
      mounts.push('39 31 0:39 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:8 - cgroup2 cgroup2 rw');
      // The CI machine's: the agent in the v2 root, which offers nothing and has no cgroup.kill of its own.
      cgroupLines.push('0::/');
      write('sys/fs/cgroup/unified/cgroup.controllers', '');
      write('sys/fs/cgroup/unified/cgroup.procs', `${pid}\n`);
    }
  }
  write('proc/self/mountinfo', mounts.join('\n') + '\n');
  write('proc/self/cgroup', cgroupLines.join('\n') + '\n');
  write('proc/devices', PROC_DEVICES);
  return { root, at, write, cleanup: () => rmSync(root, { recursive: true, force: true }) };
}

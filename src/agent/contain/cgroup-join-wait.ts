/**
 * Whether the host's cgroups make the first join of each burst of stage starts wait for an RCU
 * grace period (docs/containment.md, "A host setting that makes the joins cheap: `favordynmods`").
 *
 * Every write of a pid into a `cgroup.procs`, in any hierarchy, v1's included, takes the kernel's
 * one cgroup migration lock (`cgroup_threadgroup_rwsem`) for writing; unless some hierarchy is
 * mounted with `favordynmods`, the first writer after a pause waits for a grace period first:
 * measured 7.8 ms at the median, 27.8 at p99 (bench/cgroup-join-wait.py), against 0.15 and 0.27 with
 * it. The fix is the host's to make (every fork and exit pays a little more), so the agent only says
 * so, once at its start and in its containment report; it never remounts anything.
 */
import { parseMountinfo } from './detect-cgroups.js';

export type CgroupJoinWait =
  /** A cgroup hierarchy (`mount`) carries `favordynmods`: the lock is held in the mode that does not wait. */
  | { kind: 'favoured'; mount: string }
  /** None does: a burst's first join waits. `v2Mount`: where a remount can set it (null: v1 only, the kernel's command line is the way). */
  | { kind: 'waits'; v2Mount: string | null }
  /** No cgroup hierarchy is mounted: nothing joins. */
  | { kind: 'no-cgroups' };

/** From `/proc/self/mountinfo`'s text. The option is a super option (the cgroup filesystem's own), after the ` - fstype source`. */
export function cgroupJoinWait(mountinfo: string): CgroupJoinWait {
  let v2Mount: string | null = null;
  let any = false;
  for (const m of parseMountinfo(mountinfo)) {
    if (m.fstype !== 'cgroup2' && m.fstype !== 'cgroup') continue;
    any = true;
    if (m.superOptions.includes('favordynmods')) return { kind: 'favoured', mount: m.mountPoint };
    if (m.fstype === 'cgroup2') v2Mount ??= m.mountPoint;
  }
  return any ? { kind: 'waits', v2Mount } : { kind: 'no-cgroups' };
}

/** The sentence for the operator, in the start log and the report's problems; null where there is nothing to say. */
export function cgroupJoinWaitHint(w: CgroupJoinWait): string | null {
  if (w.kind !== 'waits') return null;
  const fix = w.v2Mount
    ? `\`mount -o remount,favordynmods ${w.v2Mount}\` (Linux 6.0+, until a reboot) or the kernel command line \`cgroup_favordynmods=true\` (6.7+)`
    : 'The kernel command line `cgroup_favordynmods=true` (Linux 6.7+; v1 hierarchies take no such option at a remount)';
  return (
    'the first cgroup join of each burst of stage starts waits for an RCU grace period (8 ms at the median, 28 at p99, measured): ' +
    `no cgroup hierarchy is mounted with favordynmods. ${fix} removes the wait; a host-wide trade (every fork and exit on the host ` +
    "takes the lock's slower path), not the agent's to make (docs/containment.md)"
  );
}

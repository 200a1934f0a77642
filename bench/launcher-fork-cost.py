"""What the Python launcher's way of starting a contained command costs (docs/containment.md,
"Joining before exec"), against the ways that would keep subprocess on vfork: `true` started N times
as a uid of its own in a cgroup per hierarchy, each way in turn (noise falls on all).

  preexec    today's: a preexec_fn joins the cgroups and drops the user (subprocess then forks)
  join+setpriv  the launcher joins the cgroups itself, vforks `setpriv … -- true` (setpriv drops
             the user), and goes back to its own cgroups
  join+user= the same, with subprocess's own user=/group=/extra_groups= (which forks too)
  vfork      `true` as root, uncontained: the floor
  join+vfork as root  the launcher's moves alone (not a way to run a stage: no user dropped)

Per spawn: the launcher's CPU (getrusage SELF), its children's (RUSAGE_CHILDREN), and the wall time
from Popen to its return (the child exec'd) and to its exit. Needs root, a hybrid or v1 host.
Usage: python3 bench/launcher-fork-cost.py [N]
"""

import os
import resource
import subprocess
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
UID = 61184
GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
NAME = "gantry-forkbench-%d" % os.getpid()


def own_cgroups():
    """(procs file of our own cgroup, procs file of the bench's) per hierarchy we can write."""
    mounts = {}
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        fstype = f[f.index("-") + 1]
        if fstype == "cgroup2":
            mounts[""] = (f[4], f[3])
        elif fstype == "cgroup":
            for opt in f[-1].split(","):
                if opt in ("memory", "cpu", "pids"):
                    mounts[opt] = (f[4], f[3])
    pairs = []
    for line in open("/proc/self/cgroup"):
        _, ctrls, path = line.strip().split(":", 2)
        key = "" if ctrls == "" else next((c for c in ctrls.split(",") if c in mounts), None)
        if key is None or key not in mounts:
            continue
        mnt, root = mounts[key]
        own = os.path.join(mnt, os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/"))
        bench = os.path.join(own, NAME)
        os.mkdir(bench)
        pairs.append((os.path.join(own, "cgroup.procs"), os.path.join(bench, "cgroup.procs")))
        del mounts[key]
    return pairs


def write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def main():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pairs = own_cgroups()
    procs = [b for _, b in pairs]

    def preexec():
        for p in procs:
            write(p, b"0")
        os.setgroups([])
        os.setresgid(UID, UID, UID)
        os.setresuid(UID, UID, UID)
        libc.prctl(38, 1, 0, 0, 0)
        os.umask(0o022)

    def joined(argv, **kw):
        for p in procs:
            write(p, b"0")
        try:
            return subprocess.Popen(argv, **kw)
        finally:
            for own, _ in pairs:
                write(own, b"0")

    setpriv = ["setpriv", "--reuid=%d" % UID, "--regid=%d" % UID, "--clear-groups", "--no-new-privs", "--"]
    common = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True, **GROUP)
    kinds = {
        "preexec (today)": lambda: subprocess.Popen(["/bin/true"], preexec_fn=preexec, **common),
        "join+setpriv (vfork)": lambda: joined(setpriv + ["/bin/true"], umask=0o022, **common),
        "join+user= (forks)": lambda: joined(["/bin/true"], user=UID, group=UID, extra_groups=[], umask=0o022, **common),
        "vfork, uncontained": lambda: subprocess.Popen(["/bin/true"], umask=0o022, **common),
        # What the launcher's own moves in and out cost: the same `true`, vforked as root between them.
        "join+vfork as root (moves only)": lambda: joined(["/bin/true"], umask=0o022, **common),
    }
    res = {k: ([], [], [], []) for k in kinds}
    try:
        for i in range(N + 10):
            for k, start in kinds.items():
                s0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
                p = start()
                t1 = time.perf_counter()
                s1 = resource.getrusage(resource.RUSAGE_SELF)
                if p.wait() != 0:
                    raise SystemExit("%s: exit %d" % (k, p.returncode))
                t2, c1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
                if i < 10:
                    continue
                r = res[k]
                r[0].append((s1.ru_utime + s1.ru_stime - s0.ru_utime - s0.ru_stime) * 1000)
                r[1].append((c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) * 1000)
                r[2].append((t1 - t0) * 1000)
                r[3].append((t2 - t0) * 1000)
    finally:
        for own, bench in pairs:
            os.rmdir(os.path.dirname(bench))
    med = lambda xs: sorted(xs)[len(xs) // 2]
    mean = lambda xs: sum(xs) / len(xs)
    print("N = %d, Python %s, %d hierarchies joined" % (N, sys.version.split()[0], len(pairs)))
    print("| way | launcher CPU mean ms | children CPU mean ms | Popen wall median ms | to exit wall median ms |")
    print("| --- | --- | --- | --- | --- |")
    for k, r in res.items():
        print("| %s | %.3f | %.3f | %.3f | %.3f |" % (k, mean(r[0]), mean(r[1]), med(r[2]), med(r[3])))


if __name__ == "__main__":
    main()

"""What the launcher's `user=` way would cost containment (docs/throughput.md, "B after A: the
journal's compaction off the loop, and the launcher's `user=` way measured").

Today the launcher's forked child joins the attempt's cgroups and drops to its user in a
`preexec_fn` (Python in the child). The `user=` way has the launcher join the cgroups itself for
the fork only (a wrapper around subprocess's `_fork_exec`: join, fork, back to its own cgroups
before it reads the exec's pipe) and uses subprocess's own `user=`/`group=`/`extra_groups=[]`,
`no_new_privs` set once on the launcher. This measures, on cgroup v1 hierarchies of its own:

  charges   both ways alternated, N contained `true`s each as uid 65534, in cgroups of
            memory (16 MiB limit), cpu, cpuacct, pids, freezer, devices: the launcher's and its
            children's CPU a job, the wall a job, and what the memory cgroup still holds once
            every child is gone (usage, rss, the recorded peak)
  quota     a cgroup with a CPU quota of 5 ms a 100 ms period whose previous "attempt" (a busy
            loop) spent it: how long the launcher's spawn in it takes, as recycled and with the
            quota written again at hand-out

Usage (root, a v1 memory and cpu hierarchy under /sys/fs/cgroup):
    python3 bench/launcher-in-cgroup.py charges [N=300] [ROUNDS=3]
    python3 bench/launcher-in-cgroup.py quota [SPAWNS=10]
"""

import ctypes
import os
import resource
import subprocess
import sys
import time

ROOT = "/sys/fs/cgroup"
HIERARCHIES = ["memory", "cpu", "cpuacct", "pids", "freezer", "devices"]
NOBODY = 65534
PR_SET_NO_NEW_PRIVS = 38
libc = ctypes.CDLL(None, use_errno=True)


def join(procs_file):
    fd = os.open(procs_file, os.O_WRONLY)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)


def home_procs():
    """This process's own cgroup.procs in each hierarchy, to move back to."""
    home = {}
    for line in open("/proc/self/cgroup"):
        _, names, path = line.strip().split(":", 2)
        for name in names.split(","):
            home[name] = path
    return ["%s/%s%s/cgroup.procs" % (ROOT, h, home[h]) for h in HIERARCHIES]


def make_cgroups(tag):
    dirs = {h: "%s/%s/gantry-bench-%s-%d" % (ROOT, h, tag, os.getpid()) for h in HIERARCHIES}
    for d in dirs.values():
        os.mkdir(d)
    with open(dirs["memory"] + "/memory.limit_in_bytes", "w") as f:
        f.write(str(16 << 20))
    return dirs


def remove_cgroups(dirs):
    time.sleep(0.05)
    for d in dirs.values():
        os.rmdir(d)


def memory_state(d):
    stat = dict(line.split() for line in open(d + "/memory.stat"))
    read = lambda name: int(open("%s/%s" % (d, name)).read())
    return read("memory.usage_in_bytes"), int(stat["rss"]), read("memory.max_usage_in_bytes")


def run_way(way, n):
    dirs = make_cgroups(way)
    procs = [dirs[h] + "/cgroup.procs" for h in HIERARCHIES]
    home = home_procs()
    real_fork_exec = subprocess._fork_exec

    def fork_exec_inside(*args):
        for p in procs:
            join(p)
        try:
            return real_fork_exec(*args)
        finally:
            for p in home:
                join(p)

    def child():
        for p in procs:
            join(p)
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
        os.umask(0o022)

    r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
    for _ in range(n):
        if way == "user=":
            subprocess._fork_exec = fork_exec_inside
            try:
                p = subprocess.Popen(["true"], user=NOBODY, group=NOBODY, extra_groups=[], process_group=0, umask=0o022, stdin=subprocess.DEVNULL)
            finally:
                subprocess._fork_exec = real_fork_exec
        else:
            p = subprocess.Popen(["true"], preexec_fn=child, process_group=0, stdin=subprocess.DEVNULL)
        p.wait()
    t1, r1, c1 = time.time(), resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = lambda a, b: (b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime) * 1000 / n
    usage, rss, peak = memory_state(dirs["memory"])
    remove_cgroups(dirs)
    print(
        "%-8s launcher %.3f + children %.3f ms of CPU a job, wall %.2f ms; left charged with no process in it: usage %d KB, rss %d KB; recorded peak %d KB"
        % (way, cpu(r0, r1), cpu(c0, c1), (t1 - t0) * 1000 / n, usage >> 10, rss >> 10, peak >> 10)
    )


def charges(n, rounds):
    # The user= way's no_new_privs is set once on the launcher; the preexec way sets it in each
    # child. Set here for both: it changes nothing for the preexec way, which sets it again.
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    for _ in range(rounds):
        for way in ("user=", "preexec"):
            run_way(way, n)


def quota(spawns):
    d = "%s/cpu/gantry-bench-quota-%d" % (ROOT, os.getpid())
    os.mkdir(d)
    write = lambda name, value: open("%s/%s" % (d, name), "w").write(value)
    write("cpu.cfs_period_us", "100000")
    write("cpu.cfs_quota_us", "5000")
    home = [p for p in home_procs() if "/cpu/" in p]
    busy = "import time\nt = time.time()\nwhile time.time() - t < 0.3: pass"
    for rewrite in (False, True):
        walls = []
        for _ in range(spawns):
            subprocess.Popen([sys.executable, "-c", busy], preexec_fn=lambda: join(d + "/cgroup.procs")).wait()
            if rewrite:
                write("cpu.cfs_quota_us", "5000")
            t = time.time()
            join(d + "/cgroup.procs")
            p = subprocess.Popen(["true"], process_group=0)
            for h in home:
                join(h)
            walls.append((time.time() - t) * 1000)
            p.wait()
        walls.sort()
        print("%-32s spawn wall p50 %.1f ms, max %.1f ms" % ("quota written again at hand-out" if rewrite else "recycled as it was", walls[len(walls) // 2], walls[-1]))
    time.sleep(0.05)
    os.rmdir(d)


def main():
    args = sys.argv[1:]
    if not args or args[0] not in ("charges", "quota"):
        sys.exit(__doc__)
    if os.geteuid() != 0:
        sys.exit("launcher-in-cgroup.py: needs root (it makes cgroups and drops to uid %d)" % NOBODY)
    if not os.path.isdir(ROOT + "/memory") or not os.path.isdir(ROOT + "/cpu"):
        sys.exit("launcher-in-cgroup.py: needs cgroup v1 memory and cpu hierarchies under %s" % ROOT)
    if args[0] == "charges":
        charges(int(args[1]) if len(args) > 1 else 300, int(args[2]) if len(args) > 2 else 3)
    else:
        quota(int(args[1]) if len(args) > 1 else 10)


if __name__ == "__main__":
    main()

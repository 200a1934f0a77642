"""How long a forked child waits to join its cgroups, the first join against the rest, after a gap
(docs/throughput.md, "B received → B spawned, taken apart").

A start of a contained command has its forked child write itself into the attempt's cgroup in
every hierarchy (the v2 one and each v1 one) before it execs (launcher.c). Every such write takes
the kernel's cgroup migration lock (`cgroup_threadgroup_rwsem`, a per-CPU rwsem) for writing, and
a writer that finds it idle first waits for an RCU grace period; writers within about a grace
period of the last one do not. So the first join after a pause waits milliseconds, the ones right
after it microseconds. This measures it: N children, one after another, each joining a cgroup of
its own making in each hierarchy named (in that order) and exiting, with GAP ms between two
children; per join, the wall time of its open and write.

    --warm MS   meanwhile, a process of this script moves itself into the cgroup it is already in
                (the v1 pids hierarchy's, read from /proc/self/cgroup) every MS ms: a writer of
                the lock that keeps it from going idle, to show what the wait is

Usage (root; cgroup v1 and/or v2 mounted under /sys/fs/cgroup):
    python3 bench/cgroup-join-wait.py [--n 40] [--gap 50] [--warm MS] [unified memory cpu ...]
"""

import os
import sys
import time

ROOT = "/sys/fs/cgroup"
NAME = f"cgroup-join-wait-bench-{os.getpid()}"


def arg(name, default):
    if name in sys.argv:
        i = sys.argv.index(name)
        value = sys.argv[i + 1]
        del sys.argv[i : i + 2]
        return type(default)(value) if default is not None else value
    return default


def own_procs(controller):
    """The cgroup.procs of the cgroup this process is in, in the v1 hierarchy of `controller`."""
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.rstrip("\n").split(":", 2)
        if controller in controllers.split(","):
            return os.path.join(ROOT, controller, path.lstrip("/"), "cgroup.procs")
    raise SystemExit(f"not in a v1 {controller} hierarchy")


def warmer(every_ms):
    """A child that writes itself into its own cgroup every `every_ms` until killed."""
    procs = own_procs("pids")
    pid = os.fork()
    if pid:
        return pid
    while True:
        with open(procs, "w") as f:
            f.write("0")
        time.sleep(every_ms / 1000)


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def main():
    n = arg("--n", 40)
    gap = arg("--gap", 50.0)
    warm = arg("--warm", 0.0)
    hierarchies = sys.argv[1:] or ["unified", "memory", "cpu", "cpuacct", "pids", "freezer", "devices"]
    dirs = [os.path.join(ROOT, h, NAME) for h in hierarchies]
    for d in dirs:
        os.mkdir(d)
    w = warmer(warm) if warm else None
    times = [[] for _ in dirs]
    try:
        for _ in range(n):
            time.sleep(gap / 1000)
            r, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                out = []
                for d in dirs:
                    t = time.perf_counter()
                    fd = os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY)
                    os.write(fd, b"0")
                    os.close(fd)
                    out.append(time.perf_counter() - t)
                os.write(wfd, " ".join(f"{x:.6f}" for x in out).encode())
                os._exit(0)
            os.close(wfd)
            got = os.read(r, 4096).decode().split()
            os.close(r)
            os.waitpid(pid, 0)
            for i, x in enumerate(got):
                times[i].append(float(x) * 1000)
    finally:
        if w:
            os.kill(w, 9)
            os.waitpid(w, 0)
        for d in dirs:
            os.rmdir(d)
    print(f"{n} children, {gap:g} ms apart, warm writer every {warm:g} ms" if warm else f"{n} children, {gap:g} ms apart, no warm writer")
    print("| join (in order) | p50 | p90 | p99 |")
    print("| --- | ---: | ---: | ---: |")
    for h, t in zip(hierarchies, times):
        print(f"| {h} | {pct(t, 50):.3f} ms | {pct(t, 90):.3f} ms | {pct(t, 99):.3f} ms |")


main()

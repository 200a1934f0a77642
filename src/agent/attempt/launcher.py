"""The Gantry agent's launcher: starts attempts' commands for the agent and records how they end.

Started by the agent (src/agent/launcher.ts, docs/agent.md "How a command is started"), it reads
one JSON line per attempt on stdin and answers on stdout:

    ready                    once, before it reads anything
    pid <id> <pid>           the command runs, leading a process group of its own
    fail <id> <message>      it could not be started (the directory, a file, the exec)
    gone <id> <message>      it could not be started: a cgroup it was to join had been removed
                             (ENOENT on its cgroup.procs; the agent starts it again in a new one)
    end <id> <status>        it ended: its exit code, or 128 + the signal that ended it

Why a program of its own: a command started by a small process with vfork and exec (no copy of
the parent's page tables, as subprocess does it) costs a fraction of a fork of the agent's Node
process, or of a shell's forks of itself for every command; and the launcher, not the agent, is the
commands' parent, so it can record how each ended in its `status` file even while the agent is
down (restarted, upgraded, crashed). The status is written before the process is reaped, so a
process seen gone always has its status on disk already, unless the launcher itself was killed.
When stdin closes (the agent stopped) it goes on until the last command it started has ended.

A job may also say where the command must be contained (docs/containment.md, "Joining before exec"):
`procs`, the cgroup.procs files of its cgroups, and `uid`/`gid`, the user it runs as. The forked
child then writes its own pid into each (a write of "0" moves the writer), drops to that user with
no supplementary groups and no new privileges, and only then execs: nothing the command starts was
ever outside its cgroups, or root. Commands run with umask 022 whatever the launcher's own (the
agent's is 077: its files are private).

Python 3.6 or later; no third-party modules.
"""

import json
import os
import selectors
import signal
import subprocess
import sys


def main():
    if sys.argv[1:] == ["--check"]:
        sys.stdout.write("ok\n")
        return
    # Not for a terminal's Ctrl-C or hangup: the agent decides when attempts stop. Caught, not
    # ignored: an ignored signal would stay ignored in the commands (a handler does not survive exec).
    signal.signal(signal.SIGINT, lambda *_: None)
    signal.signal(signal.SIGHUP, lambda *_: None)
    # SIGCHLD wakes the loop through this pipe; the handler itself does nothing.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)

    base_env = dict(os.environ)
    out = Output()
    jobs = {}  # pid -> (id, status file)
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    pending = b""
    reading = True
    out.line("ready")
    while reading or jobs:
        for key, _ in sel.select():
            if key.fd == wake_r:
                drain(wake_r)
                continue
            data = os.read(0, 1 << 16)
            if not data:
                reading = False
                sel.unregister(0)
                continue
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    start(line, base_env, jobs, out)
        reap(jobs, out)


def start(line, base_env, jobs, out):
    try:
        job = json.loads(line)
    except ValueError as err:
        sys.stderr.write("unreadable job line (%s): %r\n" % (err, line[:200]))
        return
    try:
        spawn(job, base_env, jobs, out)
    except subprocess.SubprocessError:  # only a preexec_fn's failure: confine's child wrote why
        if cgroup_gone():
            out.line("gone %s a cgroup it was to join was removed before it joined (its stderr says which)" % job.get("id"))
        else:
            out.line("fail %s could not join its cgroups or become its user (its stderr says why)" % job.get("id"))
    except Exception as err:  # no such directory, an exec refused, a NUL in a variable: that job only
        out.line("fail %s %s" % (job.get("id"), " ".join(str(err).split())))


def spawn(job, base_env, jobs, out):
    env = dict(base_env)
    env.update(job["set"])
    append = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    files = []
    try:
        # 0600 whatever the umask: what a stage prints (a secret it echoes) is the agent's to ship.
        files = [os.open(job["stdout"], append, 0o600), os.open(job["stderr"], append, 0o600)]
        # subprocess forks with vfork where it can (not posix_spawn, whose glibc leaves the child
        # ignoring two of its own signals); the child gets every signal at its default.
        proc = subprocess.Popen(
            job["argv"],
            cwd=job["cwd"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=files[0],
            stderr=files[1],
            close_fds=True,
            **GROUP,
            **confine(job),
        )
    finally:
        for fd in files:
            os.close(fd)
    # The Popen is kept until this loop has reaped its process: one dropped earlier would reap it
    # itself (subprocess polls abandoned children), before its status is written.
    jobs[proc.pid] = (job["id"], job["status"], proc)
    out.line("pid %s %d" % (job["id"], proc.pid))


# A process group of its own, led by the command (Python before 3.11: a session of its own).
GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}

PR_SET_NO_NEW_PRIVS = 38
_libc = None
# A pipe on which a child that found a cgroup gone says so before it fails (the parent learns only
# that the preexec_fn raised, not why): made with the first contained job, kept for all.
_gone = None


def cgroup_gone():
    """Whether the child that just failed found a cgroup.procs missing (a byte on the pipe, read now)."""
    if _gone is None:
        return False
    try:
        return len(os.read(_gone[0], 64)) > 0
    except BlockingIOError:
        return False


def confine(job):
    """Popen's arguments that put the command in its cgroups and make it its user, before exec.

    Without either, only the umask: subprocess then keeps forking with vfork. With them, a
    preexec_fn (a plain fork of this small process): the cgroup join must come first, while the
    child is still root, and subprocess's own `user=` would drop to the user before it.
    """
    procs = job.get("procs") or []
    uid = job.get("uid")
    gid = job.get("gid")
    if not procs and uid is None:
        return {"umask": 0o022} if sys.version_info >= (3, 9) else {}
    global _libc, _gone
    if uid is not None and _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    libc = _libc
    if procs and _gone is None:
        _gone = os.pipe()
        os.set_blocking(_gone[0], False)
    gone_w = _gone[1] if procs else None

    def child():
        try:
            for path in procs:
                try:
                    fd = os.open(path, os.O_WRONLY)
                except FileNotFoundError:
                    # Removed between the agent's mkdir (or its check of a spare) and this join:
                    # the only failure a start in a new cgroup cures, so the only one told apart.
                    os.write(gone_w, b"g")
                    raise
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
            if gone_w is not None:
                os.close(gone_w)  # passed for the join only: the command must not inherit it
            if uid is not None:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
                if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                    raise OSError(ctypes_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
            os.umask(0o022)
        except Exception as err:
            # The parent learns only that the preexec failed; the attempt's stderr (fd 2 by now) says what.
            os.write(2, ("gantry: cannot contain the command: %s\n" % err).encode())
            raise

    return {"preexec_fn": child, "pass_fds": (gone_w,)} if gone_w is not None else {"preexec_fn": child}


def ctypes_errno():
    import ctypes

    return ctypes.get_errno()


def reap(jobs, out):
    """Every child that ended: its status written, then reaped, then told."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None:
            return
        status = info.si_status if info.si_code == os.CLD_EXITED else 128 + info.si_status
        job = jobs.pop(info.si_pid, None)
        if job is not None:
            try:
                fd = os.open(job[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.write(fd, b"%d\n" % status)
                finally:
                    os.close(fd)
            except OSError:
                pass  # its directory is gone: the agent has stopped caring
        os.waitpid(info.si_pid, 0)
        if job is not None:
            job[2].returncode = status  # reaped here: its Popen must not wait for it
            out.line("end %s %d" % (job[0], status))


def drain(fd):
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


class Output:
    """Lines to the agent; once it is gone (the pipe broken), nothing more is written."""

    def __init__(self):
        self.gone = False

    def line(self, text):
        if self.gone:
            return
        data = (text + "\n").encode()
        try:
            while data:
                data = data[os.write(1, data):]
        except BrokenPipeError:
            self.gone = True


if __name__ == "__main__":
    main()

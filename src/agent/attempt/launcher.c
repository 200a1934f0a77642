/*
 * The Gantry agent's compiled launcher: the same program as launcher.py (docs/agent.md, "How a
 * command is started"), in C, so that starting a contained command costs the machine a fork of a
 * process of a few hundred kilobytes and a handful of system calls, not a Python interpreter's
 * work in the launcher and again in its forked child (docs/throughput.md, "A compiled launcher").
 *
 * It reads one job a line on stdin and answers on stdout, as launcher.py does:
 *
 *     ready                    once, before it reads anything
 *     pid <id> <pid>           the command runs, leading a process group of its own
 *     fail <id> <message>      it could not be started (the directory, a file, the exec, a malformed job)
 *     gone <id> <message>      a cgroup it was to join had been removed (ENOENT on its cgroup.procs)
 *     end <id> <status>        it ended: its exit code, or 128 + the signal that ended it
 *
 * A job (launcher-programs.ts, cLauncher) is one line of tab-separated fields, each escaped so that
 * no field holds a tab or a newline (\\ \t \n, and \0 for a NUL, which no argv or environment can
 * carry: such a job gets `fail`):
 *
 *     id cwd stdout stderr status uid gid nprocs procs... nargv argv... nset (name value)...
 *
 * uid and gid are empty for "the launcher's own user". Every count is checked against the fields
 * that follow; a line that does not parse gets `fail <id>` when its id can be read, a line on
 * stderr when not, and the launcher goes on with the next.
 *
 * The forked child does, in this order, before it execs: every signal's disposition to its default
 * and none blocked; a process group of its own; stdin from /dev/null, stdout and stderr appended to
 * the attempt's files (0600); the working directory; "0" written to each cgroup.procs (the writer
 * joins: nothing the command forks was ever outside its cgroups, docs/containment.md "Joining
 * before exec"); no supplementary groups, the gid, the uid, no new privileges; umask 022; every
 * other descriptor closed on exec. A failure in any step comes back to the parent on a pipe closed
 * by the exec, so the parent knows, before it answers, whether the command runs. The parent writes
 * each command's exit status into its status file before it reaps it (waitid with WNOWAIT), so a
 * process seen gone always has its status on disk, and it goes on after stdin closes until the
 * last command it started has ended.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* A job line longer than this is refused (its id kept for the answer) rather than buffered: no
 * command's argv and environment can be larger than the kernel's limit on them, far below it. */
#define MAX_LINE (64u << 20)
#define MAX_ID 64

/* The hash of this file, given by whoever compiles it (compile-launcher.ts, -DGANTRY_LAUNCHER_SOURCE=...):
 * what `--version` answers. Compiled by hand, without it, the agent takes the binary for stale. */
#ifndef GANTRY_LAUNCHER_SOURCE
#define GANTRY_LAUNCHER_SOURCE "unknown"
#endif

/* ---- Output: lines to the agent; once it is gone (the pipe broken), nothing more is written. ---- */

static int out_gone;

static void out_write(const char *s, size_t n) {
  while (n > 0 && !out_gone) {
    ssize_t w = write(1, s, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      out_gone = 1; /* EPIPE (SIGPIPE is ignored) or worse: the agent is not reading */
      return;
    }
    s += w;
    n -= (size_t)w;
  }
}

/* One answer line: `kind id text`, the text made one line (a path may hold a newline). */
static void answer(const char *kind, const char *id, const char *fmt, ...) {
  char text[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (n < 0) text[0] = '\0';
  for (char *p = text; *p; p++)
    if ((unsigned char)*p < 0x20) *p = ' ';
  char line[2200];
  int len = snprintf(line, sizeof line, "%s %s %s\n", kind, id, text);
  if (len < 0) return;
  if ((size_t)len >= sizeof line) {
    len = sizeof line - 1;
    line[len - 1] = '\n';
  }
  out_write(line, (size_t)len);
}

/* The id of a job line too long to read whole (its first field, up to MAX_ID bytes), or "?". */
static void line_id(const char *line, size_t len, char out[MAX_ID + 1]) {
  size_t k = 0;
  while (k < len && k < MAX_ID && line[k] != '\t') k++;
  memcpy(out, line, k);
  out[k] = '\0';
  if (!k || strpbrk(out, " \n")) strcpy(out, "?");
}

/* ---- Jobs running: pid -> id and status file. ---- */

struct running {
  pid_t pid;
  char *id;
  char *status;
};
static struct running *running;
static size_t nrunning, caprunning;

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    /* Out of memory in a process this small: nothing sensible is left to do but say so. */
    static const char msg[] = "gantry launcher: out of memory\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(70);
  }
  return q;
}

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xrealloc(NULL, n), s, n);
}

static void remember(pid_t pid, const char *id, const char *status) {
  if (nrunning == caprunning) {
    caprunning = caprunning ? caprunning * 2 : 16;
    running = xrealloc(running, caprunning * sizeof *running);
  }
  running[nrunning++] = (struct running){pid, xstrdup(id), xstrdup(status)};
}

/* ---- A job, parsed from its line in place. ---- */

struct job {
  char *id, *cwd, *out, *err, *status;
  int has_user;
  uid_t uid;
  gid_t gid;
  char **procs;
  size_t nprocs;
  char **argv; /* NULL-terminated */
  size_t nargv;
  char **setname, **setvalue;
  size_t nset;
};

struct fields {
  char **v;
  size_t n, next;
};

/* Splits the line at its tabs and unescapes each field in place; an unknown escape or a NUL is an error. */
static const char *split(char *line, struct fields *f, int *nul) {
  size_t cap = 16;
  f->v = xrealloc(NULL, cap * sizeof *f->v);
  f->n = f->next = 0;
  *nul = 0;
  char *p = line;
  for (;;) {
    if (f->n == cap) {
      cap *= 2;
      f->v = xrealloc(f->v, cap * sizeof *f->v);
    }
    f->v[f->n++] = p;
    char *w = p;
    for (; *p && *p != '\t'; p++) {
      if (*p != '\\') {
        *w++ = *p;
        continue;
      }
      switch (*++p) {
      case '\\': *w++ = '\\'; break;
      case 't': *w++ = '\t'; break;
      case 'n': *w++ = '\n'; break;
      case '0': *nul = 1; *w++ = '?'; break;
      default: *w = '\0'; return "an unknown escape";
      }
    }
    int more = *p == '\t';
    *w = '\0';
    if (!more) return NULL;
    p++;
  }
}

static char *field(struct fields *f) { return f->next < f->n ? f->v[f->next++] : NULL; }

/* A count or an id: decimal digits only, at most `max`; -1 when it is none. */
static long long number(const char *s, long long max) {
  if (!s || !*s) return -1;
  long long v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    v = v * 10 + (*s - '0');
    if (v > max) return -1;
  }
  return v;
}

/* A list: its count, then that many fields; NULL-terminated, in an array of its own. */
static char **list(struct fields *f, size_t *n, size_t per) {
  long long count = number(field(f), (long long)f->n);
  if (count < 0 || (size_t)count * per > f->n - f->next) return NULL;
  *n = (size_t)count;
  char **v = xrealloc(NULL, ((size_t)count * per + 1) * sizeof *v);
  for (size_t i = 0; i < (size_t)count * per; i++) v[i] = field(f);
  v[(size_t)count * per] = NULL;
  return v;
}

static const char *parse(struct fields *f, struct job *j) {
  memset(j, 0, sizeof *j);
  j->id = field(f);
  j->cwd = field(f);
  j->out = field(f);
  j->err = field(f);
  j->status = field(f);
  char *uid = field(f), *gid = field(f);
  if (!gid) return "too few fields";
  if (*uid || *gid) {
    long long u = number(uid, 0xfffffffe), g = number(gid, 0xfffffffe);
    if (u < 0 || g < 0) return "a uid or gid that is no number";
    j->has_user = 1;
    j->uid = (uid_t)u;
    j->gid = (gid_t)g;
  }
  if (!(j->procs = list(f, &j->nprocs, 1))) return "a bad count of cgroups";
  if (!(j->argv = list(f, &j->nargv, 1))) return "a bad count of arguments";
  if (j->nargv == 0) return "no command";
  char **set = list(f, &j->nset, 2);
  if (!set) return "a bad count of variables";
  j->setname = xrealloc(NULL, (j->nset + 1) * sizeof *j->setname);
  j->setvalue = xrealloc(NULL, (j->nset + 1) * sizeof *j->setvalue);
  for (size_t i = 0; i < j->nset; i++) {
    j->setname[i] = set[2 * i];
    j->setvalue[i] = set[2 * i + 1];
    if (!*j->setname[i] || strchr(j->setname[i], '=')) {
      free(set);
      return "a variable name that is empty or holds '='";
    }
  }
  free(set);
  if (f->next != f->n) return "fields left over";
  if (!*j->cwd || !*j->out || !*j->err || !*j->status) return "an empty path";
  return NULL;
}

static void job_free(struct job *j) {
  free(j->procs);
  free(j->argv);
  free(j->setname);
  free(j->setvalue);
}

/* The command's environment: the launcher's own, each variable the job sets replacing or added. */
static char **merged_env(const struct job *j) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = xrealloc(NULL, (n + j->nset + 1) * sizeof *env);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const char *e = environ[i];
    const char *eq = strchr(e, '=');
    size_t len = eq ? (size_t)(eq - e) : strlen(e);
    int replaced = 0;
    for (size_t s = 0; s < j->nset && !replaced; s++)
      replaced = strlen(j->setname[s]) == len && memcmp(j->setname[s], e, len) == 0;
    if (!replaced) env[k++] = environ[i];
  }
  for (size_t s = 0; s < j->nset; s++) {
    size_t a = strlen(j->setname[s]), b = strlen(j->setvalue[s]);
    char *kv = xrealloc(NULL, a + b + 2);
    memcpy(kv, j->setname[s], a);
    kv[a] = '=';
    memcpy(kv + a + 1, j->setvalue[s], b + 1);
    env[k++] = kv;
  }
  env[k] = NULL;
  return env;
}

/* The job's own "name=value" strings are the last `nset`, after the inherited ones. */
static void env_free(char **env, size_t nset) {
  size_t n = 0;
  while (env[n]) n++;
  for (size_t i = n - nset; i < n; i++) free(env[i]);
  free(env);
}

/* ---- The child: from fork to exec. ---- */

enum step { STEP_OPEN_NULL = 1, STEP_OPEN_OUT, STEP_OPEN_ERR, STEP_CHDIR, STEP_JOIN, STEP_USER, STEP_EXEC };

/* What the child tells its parent when a step fails: which, which cgroup file, and errno. */
struct failure {
  int step;
  int index;
  int err;
};

static void child_fail(int pipe_w, int step, int index, int err) {
  struct failure f = {step, index, err};
  (void)!write(pipe_w, &f, sizeof f);
  _exit(127);
}

static void say(const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (n > 0) (void)!write(2, text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
}

/* Marks every descriptor from 3 up close-on-exec: the failure pipe must stay open until the exec. */
static void cloexec_rest(void) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */) == 0) return;
#endif
  struct rlimit rl;
  long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536 ? (long)rl.rlim_cur : 65536;
  for (int fd = 3; fd < max; fd++) {
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
}

/* execve of the file, or, for a name without a slash, of the first in the command's PATH that execs. */
static int exec_command(char **argv, char **env) {
  if (strchr(argv[0], '/')) {
    execve(argv[0], argv, env);
    return errno;
  }
  const char *path = "/usr/local/bin:/usr/bin:/bin";
  for (char **e = env; *e; e++)
    if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  size_t name = strlen(argv[0]);
  int first = ENOENT;
  for (const char *p = path;; p++) {
    const char *end = strchrnul(p, ':');
    size_t dir = (size_t)(end - p);
    char *file = malloc(dir + name + 2);
    if (!file) return ENOMEM;
    memcpy(file, p, dir);
    file[dir] = '/';
    memcpy(file + dir + 1, argv[0], name + 1);
    execve(dir ? file : argv[0], argv, env);
    free(file);
    if (errno != ENOENT && errno != ENOTDIR && first == ENOENT) first = errno;
    if (!*end) return first;
    p = end;
  }
}

static void child(const struct job *j, char **env, int pipe_w) {
  /* Caught signals are reset by the exec itself; ignored and blocked ones are not. */
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setpgid(0, 0);

  int append = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC;
  int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0) child_fail(pipe_w, STEP_OPEN_NULL, 0, errno);
  /* 0600 whatever the umask: what a stage prints (a secret it echoes) is the agent's to ship. */
  int out = open(j->out, append, 0600);
  if (out < 0) child_fail(pipe_w, STEP_OPEN_OUT, 0, errno);
  int err = open(j->err, append, 0600);
  if (err < 0) child_fail(pipe_w, STEP_OPEN_ERR, 0, errno);
  /* dup2 clears close-on-exec on the copies; the originals (all above 2) close at the exec. */
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) child_fail(pipe_w, STEP_OPEN_OUT, 0, errno);

  if (chdir(j->cwd) != 0) child_fail(pipe_w, STEP_CHDIR, 0, errno);

  for (size_t i = 0; i < j->nprocs; i++) {
    int fd = open(j->procs[i], O_WRONLY | O_CLOEXEC);
    ssize_t w = fd < 0 ? -1 : write(fd, "0", 1);
    if (w != 1) {
      int e = errno;
      /* The parent learns the step; the attempt's stderr (fd 2 by now) says which file and why. */
      say("gantry: cannot contain the command: %s: %s\n", j->procs[i], strerror(e));
      child_fail(pipe_w, STEP_JOIN, (int)i, e);
    }
    close(fd);
  }
  if (j->has_user) {
    const char *what = NULL;
    if (setgroups(0, NULL) != 0) what = "setgroups";
    else if (setresgid(j->gid, j->gid, j->gid) != 0) what = "setresgid";
    else if (setresuid(j->uid, j->uid, j->uid) != 0) what = "setresuid";
    else if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) what = "prctl(PR_SET_NO_NEW_PRIVS)";
    if (what) {
      int e = errno;
      say("gantry: cannot contain the command: %s: %s\n", what, strerror(e));
      child_fail(pipe_w, STEP_USER, 0, e);
    }
  }
  umask(022);
  cloexec_rest();
  child_fail(pipe_w, STEP_EXEC, 0, exec_command(j->argv, env));
}

/* ---- The parent: start a job, reap what ended. ---- */

static void start(const struct job *j) {
  char **env = merged_env(j);
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    answer("fail", j->id, "pipe: %s", strerror(errno));
    env_free(env, j->nset);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) child(j, env, pipefd[1]);
  close(pipefd[1]);
  if (pid < 0) {
    answer("fail", j->id, "fork: %s", strerror(errno));
    close(pipefd[0]);
    env_free(env, j->nset);
    return;
  }
  env_free(env, j->nset);
  struct failure f;
  ssize_t r;
  do r = read(pipefd[0], &f, sizeof f);
  while (r < 0 && errno == EINTR);
  close(pipefd[0]);
  if (r != (ssize_t)sizeof f) {
    /* EOF: the exec closed the pipe; the command runs. */
    remember(pid, j->id, j->status);
    char line[128];
    int n = snprintf(line, sizeof line, "pid %s %d\n", j->id, (int)pid);
    out_write(line, (size_t)n);
    return;
  }
  /* It failed before the exec: reaped here, never seen by reap(). */
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  const char *e = strerror(f.err);
  switch (f.step) {
  case STEP_OPEN_NULL: answer("fail", j->id, "/dev/null: %s", e); break;
  case STEP_OPEN_OUT: answer("fail", j->id, "%s: %s", j->out, e); break;
  case STEP_OPEN_ERR: answer("fail", j->id, "%s: %s", j->err, e); break;
  case STEP_CHDIR: answer("fail", j->id, "%s: %s", e, j->cwd); break;
  case STEP_JOIN:
    if (f.err == ENOENT)
      answer("gone", j->id, "a cgroup it was to join was removed before it joined (%s)", f.index >= 0 && (size_t)f.index < j->nprocs ? j->procs[f.index] : "?");
    else
      answer("fail", j->id, "could not join its cgroups or become its user (its stderr says why)");
    break;
  case STEP_USER: answer("fail", j->id, "could not join its cgroups or become its user (its stderr says why)"); break;
  default: answer("fail", j->id, "%s: %s", e, j->argv[0]); break;
  }
}

static void write_status(const char *file, int status) {
  int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return; /* its directory is gone: the agent has stopped caring */
  char text[16];
  int n = snprintf(text, sizeof text, "%d\n", status);
  (void)!write(fd, text, (size_t)n);
  close(fd);
}

/* Every child that ended: its status written, then reaped, then told. */
static void reap(void) {
  for (;;) {
    siginfo_t info;
    info.si_pid = 0;
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    int status = info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
    size_t i = 0;
    while (i < nrunning && running[i].pid != info.si_pid) i++;
    if (i < nrunning) write_status(running[i].status, status);
    while (waitpid(info.si_pid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (i < nrunning) {
      char line[128];
      int n = snprintf(line, sizeof line, "end %s %d\n", running[i].id, status);
      out_write(line, (size_t)n);
      free(running[i].id);
      free(running[i].status);
      running[i] = running[--nrunning];
    }
  }
}

/* One job line: parsed, then started, or answered `fail` with why. */
static void job_line(char *line) {
  if (!*line) return;
  struct fields f;
  int nul;
  const char *bad = split(line, &f, &nul);
  const char *id = f.v[0];
  if (!*id || strlen(id) > MAX_ID || strpbrk(id, " \t\n")) {
    say("gantry launcher: a job line without a readable id: skipped\n");
    free(f.v);
    return;
  }
  struct job j;
  memset(&j, 0, sizeof j);
  if (!bad) bad = parse(&f, &j);
  if (!bad && nul) bad = "a NUL byte in an argument, a path or a variable";
  if (bad) answer("fail", id, "malformed job: %s", bad);
  else start(&j);
  job_free(&j);
  free(f.v);
}

static volatile sig_atomic_t child_ended;
static void on_child(int sig) {
  (void)sig;
  child_ended = 1;
}
/* Not for a terminal's Ctrl-C or hangup: the agent decides when attempts stop. Caught, not ignored:
 * the commands' dispositions are reset anyway, but a handler states the intent. */
static void on_ignored(int sig) { (void)sig; }

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--check") == 0) {
    puts("ok");
    return 0;
  }
  /* The agent's handshake before it uses a binary (host-launcher.ts): one that answers this ran
   * here, and says which source it was built from, so a stale or foreign one is rebuilt. */
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    puts("gantry-launcher " GANTRY_LAUNCHER_SOURCE);
    return 0;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_ignored;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  /* SIGCHLD only while waiting in ppoll: it wakes the wait, and never interrupts anything else. */
  sigset_t chld, waiting;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &waiting);
  sigdelset(&waiting, SIGCHLD);

  size_t cap = 1 << 16, len = 0;
  char *buf = xrealloc(NULL, cap);
  int reading = 1;
  /* A line over MAX_LINE: its id, its rest dropped up to its newline, then `fail`. */
  int skipping = 0;
  char skipped_id[MAX_ID + 1] = "";

  out_write("ready\n", 6);
  while (reading || nrunning > 0) {
    struct pollfd p = {0, POLLIN, 0};
    int n = ppoll(&p, reading ? 1 : 0, NULL, &waiting);
    if (child_ended) {
      child_ended = 0;
      reap();
    }
    if (n <= 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (cap - len < 4096) {
      cap *= 2;
      buf = xrealloc(buf, cap);
    }
    ssize_t r = read(0, buf + len, cap - len - 1);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      r = 0;
    }
    if (r == 0) {
      reading = 0;
      continue;
    }
    size_t scanned = len;
    len += (size_t)r;
    size_t startl = 0;
    for (size_t i = scanned; i < len; i++) {
      if (buf[i] != '\n') continue;
      buf[i] = '\0';
      if (skipping) {
        answer("fail", skipped_id, "malformed job: a line over %u bytes", MAX_LINE);
        skipping = 0;
      } else if (i - startl > MAX_LINE) {
        /* Over the limit with its newline in the same read (a read can return more than the
           limit's excess when the writer got ahead): judged whole, as one that came in parts. */
        char id[MAX_ID + 1];
        line_id(buf + startl, i - startl, id);
        answer("fail", id, "malformed job: a line over %u bytes", MAX_LINE);
      } else {
        job_line(buf + startl);
      }
      startl = i + 1;
    }
    memmove(buf, buf + startl, len - startl);
    len -= startl;
    if (len > MAX_LINE || (skipping && len > 0)) {
      if (!skipping) {
        line_id(buf, len, skipped_id);
        skipping = 1;
      }
      len = 0;
    }
    if (cap > (1u << 20) && len < cap / 4) {
      /* Give back what a huge job needed, keeping room for the next read. */
      cap = len + (1u << 16);
      buf = xrealloc(buf, cap);
    }
  }
  return 0;
}

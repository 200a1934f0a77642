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
 * Two more lines (docs/containment.md, "A child waiting in a spare"; the agent's ids are never
 * `prepare` or `job-in`):
 *
 *     prepare <token> nprocs procs...   a child forked and joined to the cgroups, waiting for a job;
 *                                       answered `prepared <token> <pid>` at once (not waiting
 *                                       for its joins), or `fail <token> <message>`
 *     job-in <token> <job>              the job (fields as above) run by that child, which skips
 *                                       the joins; answered as any job. A token it does not have,
 *                                       a child still joining (killed, not waited for), or one dead
 *                                       or unusable before it took the job: the job is started
 *                                       plainly, never failed for it.
 *
 * Stdin closing ends every prepared child (its pipe's EOF); the launcher waits for them too.
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
#include <stdint.h>
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

enum step { STEP_OPEN_NULL = 1, STEP_OPEN_OUT, STEP_OPEN_ERR, STEP_CHDIR, STEP_JOIN, STEP_USER, STEP_EXEC, STEP_PREPARED, STEP_RECEIVED };

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

/* Every signal's disposition to its default and none blocked: caught signals are reset by the
 * exec itself; ignored and blocked ones are not. */
static void default_signals(void) {
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

/* "0" into each cgroup.procs: the writer joins. A prepared child (below) does this long before its
 * job; a child of start() after its files and directory, as ever. */
static void join_cgroups(char **procs, size_t nprocs, int pipe_w) {
  for (size_t i = 0; i < nprocs; i++) {
    int fd = open(procs[i], O_WRONLY | O_CLOEXEC);
    ssize_t w = fd < 0 ? -1 : write(fd, "0", 1);
    if (w != 1) {
      int e = errno;
      /* The parent learns the step; the attempt's stderr (fd 2 by now) says which file and why. */
      say("gantry: cannot contain the command: %s: %s\n", procs[i], strerror(e));
      child_fail(pipe_w, STEP_JOIN, (int)i, e);
    }
    close(fd);
  }
}

/* The job's own steps, from its process group to its exec. `joined`: a prepared child, whose
 * cgroups were joined before the job came. */
static void child_job(const struct job *j, char **env, int pipe_w, int joined) {
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

  if (!joined) join_cgroups(j->procs, j->nprocs, pipe_w);
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

static void child(const struct job *j, char **env, int pipe_w) {
  default_signals();
  child_job(j, env, pipe_w, 0);
}

/* ---- The parent: start a job, reap what ended. ---- */

/* The started child's answer, from its failure pipe: EOF (the exec closed it) is `pid`; a failure
 * is reaped here, never seen by reap(), and answered. */
static void finish(const struct job *j, pid_t pid, int fail_r) {
  struct failure f;
  ssize_t r;
  do r = read(fail_r, &f, sizeof f);
  while (r < 0 && errno == EINTR);
  close(fail_r);
  if (r != (ssize_t)sizeof f) {
    /* EOF: the exec closed the pipe; the command runs. */
    remember(pid, j->id, j->status);
    char line[128];
    int n = snprintf(line, sizeof line, "pid %s %d\n", j->id, (int)pid);
    out_write(line, (size_t)n);
    return;
  }
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
  env_free(env, j->nset);
  if (pid < 0) {
    answer("fail", j->id, "fork: %s", strerror(errno));
    close(pipefd[0]);
    return;
  }
  finish(j, pid, pipefd[0]);
}

/* ---- Prepared children: forked and joined to a spare's cgroups before any job is theirs. ----
 *
 * `prepare <token> <nprocs> <procs>...` forks a child that resets its signals, joins the cgroups
 * (the joins' wait for the kernel's migration lock happens here, on no stage's path), says
 * STEP_PREPARED on its failure pipe, and blocks reading its job pipe. `job-in <token> <job>`
 * writes the job (its line as sent, length first) to that pipe; the child parses it, says
 * STEP_RECEIVED, and does the job's own steps (child_job) as any child. A child that cannot be
 * used (no such token, dead, its joins failed, gone before it said it had the job) costs the job
 * nothing: it is started as a plain job, by start(). Until STEP_RECEIVED nothing of the job has
 * run, so a fresh start after it is never a second run. EOF on the job pipe (stdin closed, the
 * launcher gone) makes the child _exit. */

struct prepared {
  char *token;
  pid_t pid;
  int job_w;  /* the launcher's end of the job pipe; -1 once closed */
  int fail_r; /* the launcher's end of the failure pipe */
};
static struct prepared *prepared;
static size_t nprepared, capprepared;

static void prepared_close(struct prepared *p) {
  if (p->job_w >= 0) close(p->job_w);
  if (p->fail_r >= 0) close(p->fail_r);
  p->job_w = p->fail_r = -1;
}

/* Takes entry i out of the list, its descriptors and token still open and held. */
static struct prepared prepared_take(size_t i) {
  struct prepared p = prepared[i];
  prepared[i] = prepared[--nprepared];
  return p;
}

/* Forgets entry i (its descriptors closed, its token freed); its child is whoever's to reap. */
static void prepared_forget(size_t i) {
  struct prepared p = prepared_take(i);
  prepared_close(&p);
  free(p.token);
}

static ssize_t prepared_find(const char *token) {
  for (size_t i = 0; i < nprepared; i++)
    if (strcmp(prepared[i].token, token) == 0) return (ssize_t)i;
  return -1;
}

static int read_full(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void prepared_child(char **procs, size_t nprocs, int job_r, int fail_w) {
  /* Nothing of the launcher's but what the job needs: every other prepared child's pipe ends (so
   * that each sees EOF when the launcher closes or dies), and its stdin, stdout and stderr (the
   * agent's pipes, replaced by the job's own files at its start: a child whose join fails says
   * nothing for a spare that had no command; the plain start that follows says what it finds). */
  for (size_t i = 0; i < nprepared; i++) prepared_close(&prepared[i]);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
  }
  default_signals();
  join_cgroups(procs, nprocs, fail_w);
  struct failure ok = {STEP_PREPARED, 0, 0};
  if (write_full(fail_w, &ok, sizeof ok) != 0) _exit(0);
  uint64_t len;
  if (read_full(job_r, &len, sizeof len) != 0 || len > MAX_LINE) _exit(0);
  char *line = malloc((size_t)len + 1);
  if (!line || read_full(job_r, line, (size_t)len) != 0) _exit(0);
  close(job_r);
  line[len] = '\0';
  struct fields f;
  struct job j;
  int nul;
  /* The launcher parsed this line before it sent it: a child that cannot is broken, and says nothing (a plain start follows). */
  if (split(line, &f, &nul) || nul || parse(&f, &j)) _exit(127);
  struct failure got = {STEP_RECEIVED, 0, 0};
  if (write_full(fail_w, &got, sizeof got) != 0) _exit(127);
  /* Its own copy of the environment, never freed: the exec replaces it all. */
  child_job(&j, merged_env(&j), fail_w, 1);
}

static void prepare_line(struct fields *f) {
  char *token = field(f);
  if (!token || !*token || strlen(token) > MAX_ID || strpbrk(token, " \t\n")) {
    say("gantry launcher: a prepare line without a readable token: skipped\n");
    return;
  }
  size_t nprocs;
  char **procs = list(f, &nprocs, 1);
  if (!procs || f->next != f->n || prepared_find(token) >= 0) {
    answer("fail", token, "malformed prepare: %s", !procs ? "a bad count of cgroups" : f->next != f->n ? "fields left over" : "a token already prepared");
    free(procs);
    return;
  }
  int jobp[2], failp[2];
  if (pipe2(jobp, O_CLOEXEC) != 0) {
    answer("fail", token, "pipe: %s", strerror(errno));
    free(procs);
    return;
  }
  if (pipe2(failp, O_CLOEXEC) != 0) {
    answer("fail", token, "pipe: %s", strerror(errno));
    close(jobp[0]);
    close(jobp[1]);
    free(procs);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(jobp[1]);
    close(failp[0]);
    prepared_child(procs, nprocs, jobp[0], failp[1]);
  }
  close(jobp[0]);
  close(failp[1]);
  free(procs);
  if (pid < 0) {
    answer("fail", token, "fork: %s", strerror(errno));
    close(jobp[1]);
    close(failp[0]);
    return;
  }
  if (nprepared == capprepared) {
    capprepared = capprepared ? capprepared * 2 : 16;
    prepared = xrealloc(prepared, capprepared * sizeof *prepared);
  }
  prepared[nprepared++] = (struct prepared){xstrdup(token), pid, jobp[1], failp[0]};
  /* Not waited for: its joins may wait for the migration lock, and the next job must not. */
  char line[128];
  int n = snprintf(line, sizeof line, "prepared %s %d\n", token, (int)pid);
  out_write(line, (size_t)n);
}

/* A prepared child that cannot take the job: reaped (it has exited, or is about to: its pipes are closed). */
static void prepared_discard(struct prepared *p) {
  prepared_close(p);
  kill(p->pid, SIGKILL);
  while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

/* `job-in <token> <job>`: the job to the token's prepared child, or, failing that, started as a plain one. */
static void start_prepared(const struct job *j, const char *token, const char *raw, size_t rawlen) {
  ssize_t i = prepared_find(token);
  if (i < 0) {
    start(j);
    return;
  }
  struct prepared p = prepared_take((size_t)i);
  free(p.token);
  p.token = NULL;
  struct failure f;
  uint64_t len = rawlen;
  /* Still joining (its joins waiting for the migration lock, or at the last stage's low cpu weight):
   * not waited for, which would hold every job behind this one; killed, and the job started plainly. */
  struct pollfd joined = {p.fail_r, POLLIN, 0};
  if (poll(&joined, 1, 0) != 1) {
    prepared_close(&p);
    kill(p.pid, SIGKILL); /* reaped by reap(), as a child of no job */
    start(j);
    return;
  }
  /* Joined (its first word), then the job, then that it has it: anything else and it never ran any of the job. */
  if (read_full(p.fail_r, &f, sizeof f) != 0 || f.step != STEP_PREPARED || write_full(p.job_w, &len, sizeof len) != 0 ||
      write_full(p.job_w, raw, rawlen) != 0) {
    prepared_discard(&p);
    start(j);
    return;
  }
  close(p.job_w);
  p.job_w = -1;
  if (read_full(p.fail_r, &f, sizeof f) != 0 || f.step != STEP_RECEIVED) {
    prepared_discard(&p);
    start(j);
    return;
  }
  finish(j, p.pid, p.fail_r);
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
    /* A prepared child that ended before its job (killed with its spare, its joins failed, stdin closed). */
    for (size_t k = 0; k < nprepared; k++)
      if (prepared[k].pid == info.si_pid) {
        prepared_forget(k);
        break;
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

/* One line: a job (or `job-in <token>` and a job) parsed, then started, or answered `fail` with
 * why; or `prepare`. */
static void job_line(char *line) {
  if (!*line) return;
  if (strncmp(line, "prepare\t", 8) == 0) {
    struct fields f;
    int nul;
    const char *bad = split(line + 8, &f, &nul);
    if (bad || nul) say("gantry launcher: a prepare line that does not parse: skipped\n");
    else prepare_line(&f);
    free(f.v);
    return;
  }
  const char *token = NULL;
  char *raw = NULL;
  size_t rawlen = 0;
  if (strncmp(line, "job-in\t", 7) == 0) {
    char *tab = strchr(line + 7, '\t');
    if (!tab) {
      say("gantry launcher: a job-in line without a job: skipped\n");
      return;
    }
    *tab = '\0';
    token = line + 7;
    line = tab + 1;
    /* The job as sent, for the prepared child to parse: split() below unescapes it in place. */
    raw = xstrdup(line);
    rawlen = strlen(raw);
  }
  struct fields f;
  int nul;
  const char *bad = split(line, &f, &nul);
  const char *id = f.v[0];
  if (!*id || strlen(id) > MAX_ID || strpbrk(id, " \t\n")) {
    say("gantry launcher: a job line without a readable id: skipped\n");
    free(f.v);
    free(raw);
    return;
  }
  struct job j;
  memset(&j, 0, sizeof j);
  if (!bad) bad = parse(&f, &j);
  if (!bad && nul) bad = "a NUL byte in an argument, a path or a variable";
  if (bad) answer("fail", id, "malformed job: %s", bad);
  else if (token) start_prepared(&j, token, raw, rawlen);
  else start(&j);
  job_free(&j);
  free(f.v);
  free(raw);
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
  while (reading || nrunning > 0 || nprepared > 0) {
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
      /* Every prepared child reads EOF and exits; reap() forgets each as it ends. */
      for (size_t k = 0; k < nprepared; k++) prepared_close(&prepared[k]);
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

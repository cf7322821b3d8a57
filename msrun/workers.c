/* Spawning workers with their environment, and stopping them (their
 * output is forwarded by output.c). */
#include "launcher/workers.h"
#include "launcher/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "launcher/cpus.h"

extern char **environ;

static int env_skip(const char *entry)
{
    static const char *const ours[] = {
        "MSR_RANK",
        "MSR_WORLD_SIZE",
        "MSR_LOCAL_RANK",
        "MSR_LOCAL_WORLD_SIZE",
        "MSR_NODE_RANK",
        "MSR_NODE_COUNT",
        "MSR_GENERATION",
        "MSR_JOB_ID",
        "MSR_AGENT",
        "MSR_COORDINATOR",
        "MSR_TOKEN",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RUN_ID",
        "MSR_ROLE",
        "MSR_PS_SERVERS",
        "MSR_PS_STALENESS",
        "MSR_INCARNATION",
        "MSR_MACHINE_RANKS",
    };
    const char *eq = strchr(entry, '=');
    size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
    for (size_t i = 0; i < MSR_ARRAY_SIZE(ours); i++)
        if (strlen(ours[i]) == n && strncmp(entry, ours[i], n) == 0)
            return 1;
    return 0;
}

static void free_env(char **envp)
{
    if (envp == NULL)
        return;
    for (char **p = envp; *p; p++)
        msr_free(*p);
    msr_free(envp);
}

/* ---- Python workers: where msrun's package and libmsrun are ---- */

/* The install's layout relative to its prefix (set by the build for this
 * file; an absolute value is used as it is). */
#ifndef MSRUN_INSTALL_LIBDIR
#define MSRUN_INSTALL_LIBDIR "lib"
#endif
#ifndef MSRUN_INSTALL_PYDIR
#define MSRUN_INSTALL_PYDIR "lib/python3/dist-packages"
#endif

/* snprintf that says when the path did not fit: nonzero then */
static int path_fmt(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int path_fmt(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= size;
}

/* The source directory a build tree's CMakeCache.txt names, into out:
 * nonzero when root holds no CMakeCache.txt or it names none. */
static int build_tree_source(const char *root, char *out, size_t size)
{
    char path[PATH_MAX];
    if (path_fmt(path, sizeof path, "%s/CMakeCache.txt", root))
        return -1;
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    static const char key[] = "CMAKE_HOME_DIRECTORY:INTERNAL=";
    char line[PATH_MAX + 64];
    int rc = -1;
    while (rc != 0 && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, sizeof key - 1) != 0)
            continue;
        line[strcspn(line, "\r\n")] = '\0';
        rc = path_fmt(out, size, "%s", line + sizeof key - 1);
    }
    fclose(f);
    return rc;
}

/* Where msrun's Python package (the directory to put on PYTHONPATH) and
 * libmsrun.so are, from msrun's own executable: in a build tree,
 * BUILD/bin/msrun gives the source tree's python/ (BUILD/CMakeCache.txt
 * names the source tree) and BUILD/lib/libmsrun.so; installed,
 * PREFIX/bin/msrun gives PREFIX/MSRUN_INSTALL_PYDIR and
 * PREFIX/MSRUN_INSTALL_LIBDIR/libmsrun.so.MAJOR (each used as it is when
 * absolute). Each is set only where the file exists; empty otherwise. */
static void python_paths(char *pydir, char *lib, size_t size)
{
    char root[PATH_MAX], src[PATH_MAX], probe[PATH_MAX];
    pydir[0] = lib[0] = '\0';
    if (realpath("/proc/self/exe", root) == NULL)
        return;
    for (int up = 0; up < 2; up++) { /* .../bin/msrun -> .../bin -> ... */
        char *slash = strrchr(root, '/');
        if (slash == NULL)
            return;
        *slash = '\0';
    }
    const char *py = MSRUN_INSTALL_PYDIR, *ld = MSRUN_INSTALL_LIBDIR;
    int bad;
    if (build_tree_source(root, src, sizeof src) == 0)
        bad = path_fmt(pydir, size, "%s/python", src) ||
              path_fmt(lib, size, "%s/lib/libmsrun.so", root);
    else
        bad = path_fmt(pydir, size, "%s%s%s", py[0] == '/' ? "" : root, py[0] == '/' ? "" : "/",
                       py) ||
              path_fmt(lib, size, "%s%s%s/libmsrun.so.%d", ld[0] == '/' ? "" : root,
                       ld[0] == '/' ? "" : "/", ld, MSR_VERSION_MAJOR);
    if (bad || path_fmt(probe, sizeof probe, "%s/msrun/__init__.py", pydir) ||
        access(probe, R_OK) != 0)
        pydir[0] = '\0';
    if (bad || access(lib, R_OK) != 0)
        lib[0] = '\0';
}

/* Adds "NAME=VALUE" to envp[*k_p] in place of an entry of that name,
 * or at the end. Nonzero when out of memory. */
static int env_put(char **envp, size_t *k_p, const char *name, const char *value)
{
    size_t n = strlen(name), len = n + strlen(value) + 2;
    char *entry = msr_malloc(len);
    if (entry == NULL)
        return -1;
    snprintf(entry, len, "%s=%s", name, value);
    for (size_t i = 0; i < *k_p; i++)
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=') {
            msr_free(envp[i]);
            envp[i] = entry;
            return 0;
        }
    envp[(*k_p)++] = entry;
    return 0;
}

/* So that `import msrun` works in a worker without the user's help: msrun's
 * package directory put first on PYTHONPATH (what the user set stays after
 * it), and MSRUN_LIBRARY naming the libmsrun beside this msrun, unless the
 * user set one. Nothing is added where msrun finds neither (a copied
 * binary). Nonzero when out of memory. */
static int env_add_python(char **envp, size_t *k_p)
{
    char pydir[PATH_MAX], lib[PATH_MAX];
    python_paths(pydir, lib, sizeof pydir);
    if (pydir[0]) {
        const char *old = getenv("PYTHONPATH");
        size_t n = strlen(pydir);
        int first = old && strncmp(old, pydir, n) == 0 && (old[n] == ':' || old[n] == '\0');
        size_t len = n + (old ? strlen(old) : 0) + 2;
        char *value = msr_malloc(len);
        if (value == NULL)
            return -1;
        if (old == NULL || *old == '\0' || first)
            snprintf(value, len, "%s", old && first ? old : pydir);
        else
            snprintf(value, len, "%s:%s", pydir, old);
        int rc = env_put(envp, k_p, "PYTHONPATH", value);
        msr_free(value);
        if (rc)
            return -1;
    }
    const char *set = getenv("MSRUN_LIBRARY");
    if (lib[0] && (set == NULL || *set == '\0'))
        return env_put(envp, k_p, "MSRUN_LIBRARY", lib);
    return 0;
}

/* Parameter server roles (docs/ps.md): the last ps_servers global ranks
 * are servers, the others workers; the servers' mode; and how many times
 * this rank was replaced alone (asynchronous workers). Nonzero when out of
 * memory. */
static int env_add_role(char **envp, size_t *k_p, const msr_spawn_env_t *e, int rank)
{
    char line[64];
    int server = rank >= e->world_size - e->ps_servers;
    snprintf(line, sizeof line, "MSR_ROLE=%s", server ? "server" : "worker");
    if ((envp[*k_p] = msr_strdup(line)) == NULL)
        return -1;
    (*k_p)++;
    snprintf(line, sizeof line, "MSR_PS_SERVERS=%d", e->ps_servers);
    if ((envp[*k_p] = msr_strdup(line)) == NULL)
        return -1;
    (*k_p)++;
    snprintf(line, sizeof line, "MSR_PS_STALENESS=%d", e->ps_staleness);
    if ((envp[*k_p] = msr_strdup(line)) == NULL)
        return -1;
    (*k_p)++;
    snprintf(line, sizeof line, "MSR_INCARNATION=%d", e->incarnation);
    if ((envp[*k_p] = msr_strdup(line)) == NULL)
        return -1;
    (*k_p)++;
    return 0;
}

/* The worker's environment: msrun's own, minus the variables msrun sets,
 * plus those. Built before fork so the child allocates nothing. */
static char **build_env(const msr_spawn_env_t *e, int local_rank)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = msr_calloc(n + 48, sizeof *envp);
    if (envp == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (env_skip(environ[i]))
            continue;
        if ((envp[k] = msr_strdup(environ[i])) == NULL)
            goto err;
        k++;
    }
    int rank = e->rank_offset + local_rank;
    struct {
        const char *name;
        const char *text;
        long value;
    } vars[] = {
        {"MSR_RANK", NULL, rank},
        {"MSR_WORLD_SIZE", NULL, e->world_size},
        {"MSR_LOCAL_RANK", NULL, local_rank},
        {"MSR_LOCAL_WORLD_SIZE", NULL, e->local_world_size},
        {"MSR_NODE_RANK", NULL, e->node_rank},
        {"MSR_NODE_COUNT", NULL, e->node_count},
        {"MSR_GENERATION", NULL, e->generation},
        {"MSR_JOB_ID", e->job_id, 0},
        {"MSR_COORDINATOR", e->coordinator, 0},
        {"MSR_TOKEN", e->token, 0},
        {"MSR_AGENT", e->agent_socket, 0},
        {"RANK", NULL, rank},
        {"WORLD_SIZE", NULL, e->world_size},
        {"LOCAL_RANK", NULL, local_rank},
        {"LOCAL_WORLD_SIZE", NULL, e->local_world_size},
        {"GROUP_RANK", NULL, e->node_rank},
        {"GROUP_WORLD_SIZE", NULL, e->node_count},
        {"ROLE_RANK", NULL, rank},
        {"ROLE_WORLD_SIZE", NULL, e->world_size},
        {"MASTER_ADDR", e->master_addr, 0},
        {"MASTER_PORT", NULL, e->master_port},
        {"TORCHELASTIC_RESTART_COUNT", NULL, e->restart_count},
        {"TORCHELASTIC_MAX_RESTARTS", NULL, e->max_restarts},
        {"TORCHELASTIC_RUN_ID", e->job_id, 0},
        {"MSR_MACHINE_RANKS", NULL, e->machine_ranks},
    };
    for (size_t i = 0; i < MSR_ARRAY_SIZE(vars); i++) {
        char line[4400];
        if (vars[i].text == NULL &&
            (strcmp(vars[i].name, "MSR_AGENT") == 0 ||
             strcmp(vars[i].name, "MSR_COORDINATOR") == 0 ||
             strcmp(vars[i].name, "MSR_TOKEN") == 0 || strcmp(vars[i].name, "MASTER_ADDR") == 0 ||
             strcmp(vars[i].name, "MSR_JOB_ID") == 0 ||
             strcmp(vars[i].name, "TORCHELASTIC_RUN_ID") == 0))
            continue;
        if (strcmp(vars[i].name, "MSR_MACHINE_RANKS") == 0 && vars[i].value <= 0)
            continue; /* not known (an older coordinator) */
        if (vars[i].text)
            snprintf(line, sizeof line, "%s=%s", vars[i].name, vars[i].text);
        else
            snprintf(line, sizeof line, "%s=%ld", vars[i].name, vars[i].value);
        if ((envp[k] = msr_strdup(line)) == NULL)
            goto err;
        k++;
    }
    if (e->ps_servers > 0 && env_add_role(envp, &k, e, rank) != 0)
        goto err;
    if (e->worker_timeout_ms > 0) {
        char line[64];
        snprintf(line, sizeof line, "MSR_WORKER_TIMEOUT_MS=%lld", (long long)e->worker_timeout_ms);
        if ((envp[k] = msr_strdup(line)) == NULL)
            goto err;
        k++;
    }
    /* Python's stdout is block-buffered on a pipe: without this a worker's
     * lines arrive when it exits */
    if (getenv("PYTHONUNBUFFERED") == NULL) {
        if ((envp[k] = msr_strdup("PYTHONUNBUFFERED=1")) == NULL)
            goto err;
        k++;
    }
    if (env_add_python(envp, &k))
        goto err;
    if (getenv("OMP_NUM_THREADS") == NULL) {
        char line[40]; /* a bound worker: one thread per core it was given */
        snprintf(line, sizeof line, "OMP_NUM_THREADS=%d",
                 e->places ? e->places[local_rank].cores : 1);
        if ((envp[k] = msr_strdup(line)) == NULL)
            goto err;
        k++;
    }
    envp[k] = NULL;
    return envp;
err:
    free_env(envp);
    return NULL;
}

/* Opens (or creates) the log file l names: this user's only (0600), never
 * through a symbolic link planted in its place (O_NOFOLLOW refuses it:
 * ELOOP), appended to; l->size is its size. */
static msr_status_t log_file_open(msr_worker_log_t *l, int *fd_p)
{
    struct stat sb;
    int fd = openat(l->dir_fd, l->name,
                    O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0)
        return msr_err(MSR_ERR_SYSTEM, "cannot open log file %s/%s: %s", l->dir, l->name,
                       errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) {
        close(fd);
        return msr_err(MSR_ERR_SYSTEM, "log file %s/%s is not a regular file of this user", l->dir,
                       l->name);
    }
    msr_fd_set_nonblock(fd, 0);
    l->size = sb.st_size;
    l->line = 0;
    *fd_p = fd;
    return MSR_OK;
}

/* Moves w's log file to NAME.1 (replacing the one before) and starts a new
 * one. On failure the old file stays in use (reported once): output is
 * never dropped for want of a rotation. */
static void log_rotate(msr_worker_t *w)
{
    msr_worker_log_t *l = &w->logf;
    char old[300];
    snprintf(old, sizeof old, "%s.1", l->name);
    int fd = -1;
    if (renameat(l->dir_fd, l->name, l->dir_fd, old) != 0)
        msr_err_set("cannot move log file %s/%s to %s: %s", l->dir, l->name, old, strerror(errno));
    else if (log_file_open(l, &fd) == MSR_OK) {
        close(w->log_fd);
        w->log_fd = w->log.fd = fd;
        return;
    }
    if (!l->warned)
        MSR_WARN("%s; rank %d's log grows past --log_max_bytes %lld", msr_err_msg(), w->rank,
                 (long long)l->max);
    l->warned = 1;
    l->size = 0; /* write on, in the file there is */
}

/* Writes piece (of one line; ends_line: with its '\n') whole. */
static void log_put(msr_worker_t *w, const char *piece, size_t len, int ends_line)
{
    msr_worker_log_t *l = &w->logf;
    msr_write_all(w->log_fd, piece, len);
    l->size += (int64_t)len;
    l->line = ends_line ? 0 : l->line + (int64_t)len;
}

/* Writes what room the file has for piece, then the marker that ends the
 * cut line; the rest of a line without its '\n' yet is dropped as it comes. */
static void log_cut(msr_worker_t *w, const char *piece, size_t len, int ends_line)
{
    msr_worker_log_t *l = &w->logf;
    const size_t mark = sizeof MSR_LOG_CUT_MARK - 1;
    int64_t room = l->max - l->size - (int64_t)mark;
    size_t keep = room > 0 ? (size_t)room : 0;
    msr_write_all(w->log_fd, piece, keep < len ? keep : len);
    msr_write_all(w->log_fd, MSR_LOG_CUT_MARK, mark);
    l->size += (int64_t)(keep < len ? keep : len) + (int64_t)mark;
    l->line = 0;
    l->cutting = !ends_line;
}

void msr_worker_log_write(msr_worker_t *w, const char *data, size_t len)
{
    msr_worker_log_t *l = &w->logf;
    while (len > 0 && w->log_fd >= 0) {
        const char *nl = memchr(data, '\n', len);
        size_t piece = nl != NULL ? (size_t)(nl - data) + 1 : len; /* of one line */
        if (l->cutting) {
            l->cutting = nl == NULL; /* the rest of a cut line: dropped */
        } else if (l->max > 0 && l->size + (int64_t)piece > l->max) {
            if (l->line == 0 && l->size > 0)
                log_rotate(w); /* the line starts a new file */
            if (l->size + (int64_t)piece > l->max)
                log_cut(w, data, piece, nl != NULL);
            else
                log_put(w, data, piece, nl != NULL);
        } else {
            log_put(w, data, piece, nl != NULL);
        }
        data += piece;
        len -= piece;
    }
}

/* Opens worker w's log file in the run's log directory: this user's only
 * (0600), and never through a symbolic link planted in the log's place
 * (O_NOFOLLOW refuses it: ELOOP). A restart appends to the file of this
 * run; every generation's start is marked in it. */
static msr_status_t open_worker_log(msr_worker_t *w, const msr_spawn_env_t *e, const char *name)
{
    msr_worker_log_t *l = &w->logf;
    l->dir_fd = e->log_dir_fd;
    l->dir = e->log_dir;
    snprintf(l->name, sizeof l->name, "%s", name);
    l->max = e->log_max_bytes;
    msr_status_t st = log_file_open(l, &w->log_fd);
    if (st != MSR_OK)
        return st;
    w->log.fd = w->log_fd;
    char when[40], line[200];
    msr_iso_time(msr_wall_time(), when, sizeof when);
    int n;
    if (e->restart_count > 0)
        n = snprintf(line, sizeof line,
                     "=== msrun: generation %d started %s (restart %d of %d) ===\n", e->generation,
                     when, e->restart_count, e->max_restarts);
    else
        n = snprintf(line, sizeof line, "=== msrun: generation %d started %s ===\n", e->generation,
                     when);
    msr_worker_log_write(w, line, (size_t)n);
    return MSR_OK;
}

/* A pseudo-terminal for a worker's stdout and stderr: msrun keeps the
 * master (*master_p), the worker gets the other side (*slave_p), which does
 * not become its controlling terminal (O_NOCTTY, and the worker makes no
 * session), so the worker stays in the process group msrun signals. '\n'
 * is not turned into "\r\n", and the window is msrun's terminal's, when it
 * has one. */
static msr_status_t pty_open(int *master_p, int *slave_p)
{
    char name[128];
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), s = -1;
    if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0 || ptsname_r(m, name, sizeof name) != 0 ||
        (s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
        msr_err_set("cannot open a pseudo-terminal: %s", strerror(errno));
        if (m >= 0)
            close(m);
        return MSR_ERR_SYSTEM;
    }
    struct termios t;
    if (tcgetattr(s, &t) == 0) {
        t.c_oflag &= ~(tcflag_t)ONLCR;
        tcsetattr(s, TCSANOW, &t);
    }
    struct winsize ws;
    int fds[3] = {STDOUT_FILENO, STDERR_FILENO, STDIN_FILENO};
    for (int i = 0; i < 3; i++) {
        if (ioctl(fds[i], TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
            ioctl(m, TIOCSWINSZ, &ws);
            break;
        }
    }
    *master_p = m;
    *slave_p = s;
    return MSR_OK;
}

/* Worker w's TORCHELASTIC_ERROR_FILE (torch's @record writes its
 * exception there, msr_report_exit reads it): error_<rank>.json in the
 * run's log directory, else in the job's private directory (0700, where
 * the agent's socket is). A file left by an earlier generation is removed. */
static void error_file_name(msr_worker_t *w, const msr_spawn_env_t *e)
{
    const char *dir = e->log_dir;
    size_t dlen = dir ? strlen(dir) : 0;
    w->error_file[0] = '\0';
    w->error_private = 0;
    if (dir == NULL && e->agent_socket && strrchr(e->agent_socket, '/')) {
        dir = e->agent_socket;
        dlen = (size_t)(strrchr(dir, '/') - dir);
        w->error_private = 1;
    }
    if (dir == NULL)
        return;
    int n = snprintf(w->error_file, sizeof w->error_file, "%.*s/error_%d.json", (int)dlen, dir,
                     w->rank);
    if (n < 0 || (size_t)n >= sizeof w->error_file)
        w->error_file[0] = '\0';
    else if (unlink(w->error_file) != 0 && errno != ENOENT)
        MSR_WARN("cannot remove %s: %s", w->error_file, strerror(errno));
}

/* Puts the entry "NAME=VALUE" in envp (build_env's: room for it), in place
 * of the one of that name already there. */
static int env_put_entry(char **envp, const char *entry)
{
    size_t n = (size_t)(strchr(entry, '=') - entry) + 1, k = 0;
    while (envp[k] && strncmp(envp[k], entry, n) != 0)
        k++;
    char *copy = msr_strdup(entry);
    if (copy == NULL)
        return -1;
    if (envp[k] == NULL)
        envp[k + 1] = NULL;
    msr_free(envp[k]);
    envp[k] = copy;
    return 0;
}

msr_status_t msr_worker_spawn(msr_worker_t *w, struct event_base *base, const msr_spawn_env_t *e,
                              int local_rank, const msr_worker_io_t *io)
{
    msr_status_t st = MSR_ERR_SYSTEM;
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    msr_out_tail_t *out_tail = w->out_tail; /* the caller's, kept */
    memset(w, 0, sizeof *w);
    w->out_tail = out_tail;
    w->local_rank = local_rank;
    w->rank = e->rank_offset + local_rank;
    w->out.fd = w->err.fd = -1;
    w->log_fd = w->log.fd = -1;
    w->output = e->output;
    w->pty = e->pty;
    if (e->output->tag)
        w->prefix_len =
            snprintf(w->prefix, sizeof w->prefix, "[node %d rank %d] ", e->node_rank, w->rank);
    char **envp = build_env(e, local_rank);
    if (envp == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory building the environment");
    error_file_name(w, e);
    char line[PATH_MAX + 32];
    snprintf(line, sizeof line, "TORCHELASTIC_ERROR_FILE=%s", w->error_file);
    if (w->error_file[0] && env_put_entry(envp, line) != 0) {
        st = msr_err(MSR_ERR_NO_MEMORY, "out of memory building the environment");
        goto err_env;
    }
    if (e->log_dir && io->file && io->log_name[0] && open_worker_log(w, e, io->log_name) != MSR_OK)
        goto err_env;
    if (e->pty) {
        /* one stream, as on a terminal: both ends in outp, errp unused */
        if (pty_open(&outp[0], &outp[1]) != MSR_OK)
            goto err_pipes;
    } else if (pipe2(outp, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
        msr_err_set("pipe: %s", strerror(errno));
        goto err_pipes;
    }
    int err_fd = e->pty ? outp[1] : errp[1];
    msr_spawn_options_t so = {
        .path = e->path,
        .argv = e->argv,
        .envp = envp,
        .stdio = {{MSR_SPAWN_FD, e->devnull}, {MSR_SPAWN_FD, outp[1]}, {MSR_SPAWN_FD, err_fd}},
        .extra_fd = -1,
        .new_group = 1,
        .death_signal = SIGKILL,
        .cpus = e->places ? &e->places[local_rank].cpus : NULL,
    };
    pid_t pid;
    st = msr_spawn(&so, &pid);
    close(outp[1]);
    if (errp[1] >= 0)
        close(errp[1]);
    outp[1] = errp[1] = -1;
    free_env(envp);
    envp = NULL;
    if (st != MSR_OK)
        goto err_pipes;
    w->pid = pid;
    w->running = 1;
    if (msr_stream_open(&w->out, w, base, outp[0], 0) != MSR_OK ||
        (!e->pty && msr_stream_open(&w->err, w, base, errp[0], 1) != MSR_OK)) {
        msr_err_set("cannot watch the output of rank %d", w->rank);
        if (w->out.fd < 0)
            close(outp[0]);
        if (w->err.fd < 0 && errp[0] >= 0)
            close(errp[0]);
        return MSR_ERR_NO_MEMORY;
    }
    /* with a pseudo-terminal, out carries stderr too: the stdout bits decide */
    w->out.to_term = (io->terminal & MSR_STD_OUT) != 0;
    w->out.to_file = (io->file & MSR_STD_OUT) != 0;
    w->out.keep_tail = e->pty;
    w->err.to_term = (io->terminal & MSR_STD_ERR) != 0;
    w->err.to_file = (io->file & MSR_STD_ERR) != 0;
    w->err.keep_tail = 1;
    return MSR_OK;

err_pipes:
    for (int i = 0; i < 2; i++) {
        if (outp[i] >= 0)
            close(outp[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    if (w->log_fd >= 0)
        close(w->log_fd);
    w->log_fd = w->log.fd = -1;
err_env:
    free_env(envp);
    return st;
}

void msr_worker_signal(msr_worker_t *w, int sig)
{
    if (w->pid > 0 && kill(-w->pid, sig) != 0 && errno == ESRCH && w->running)
        kill(w->pid, sig);
}

void msr_worker_cleanup(msr_worker_t *w)
{
    if (w->error_private && w->error_file[0]) /* the job's directory goes */
        unlink(w->error_file);
    w->error_file[0] = '\0';
    msr_stream_close(&w->out);
    msr_stream_close(&w->err);
    msr_buf_cleanup(&w->out.partial);
    msr_buf_cleanup(&w->err.partial);
    if (w->log_fd >= 0)
        close(w->log_fd);
    w->log_fd = w->log.fd = -1;
    w->log.owner = NULL;
    for (int i = 0; i < MSR_TAIL_LINES; i++) {
        msr_free(w->tail[i]);
        w->tail[i] = NULL;
    }
    w->tail_count = w->tail_next = 0;
}

const char *msr_worker_describe(const msr_worker_t *w, char *buf, size_t len)
{
    char sig[32];
    if (WIFSIGNALED(w->status))
        snprintf(buf, len, "was killed by %s%s",
                 msr_signal_name(WTERMSIG(w->status), sig, sizeof sig),
                 WCOREDUMP(w->status) ? " (core dumped)" : "");
    else
        snprintf(buf, len, "exited with code %d", WEXITSTATUS(w->status));
    return buf;
}

int msr_worker_exit_code(const msr_worker_t *w)
{
    if (WIFSIGNALED(w->status))
        return 128 + WTERMSIG(w->status);
    return WEXITSTATUS(w->status);
}

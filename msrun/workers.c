/* Spawning workers and forwarding their output. */
#include "msrun/workers.h"
#include "msrun/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
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
#include "msrun/cpus.h"
#include "rendezvous/progress.h"

extern char **environ;

/* ---- output ---- */

void msr_iso_time(double t, char *buf, size_t len)
{
    time_t secs = (time_t)t;
    int ms = (int)((t - (double)secs) * 1000);
    if (ms > 999)
        ms = 999;
    struct tm tm;
    gmtime_r(&secs, &tm);
    char day[24];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03dZ", day, ms);
}

void msr_output_init(msr_output_t *out, int tag, int timestamps)
{
    memset(out, 0, sizeof *out);
    out->term[0].fd = STDOUT_FILENO;
    out->term[1].fd = STDERR_FILENO;
    out->tag = tag;
    out->timestamps = timestamps;
    struct stat a, b;
    out->same_file = fstat(STDOUT_FILENO, &a) == 0 && fstat(STDERR_FILENO, &b) == 0 &&
                     a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    /* rows need one screen that both streams (and msrun's log) share */
    msr_board_init(&out->board, STDOUT_FILENO, out->same_file);
}

void msr_output_cleanup(msr_output_t *out)
{
    msr_board_cleanup(&out->board);
}

static void tail_push(msr_worker_t *w, const char *line, size_t len)
{
    if (len > MSR_TAIL_LINE_MAX)
        len = MSR_TAIL_LINE_MAX;
    char *copy = msr_strndup(line, len);
    if (copy == NULL)
        return;
    msr_free(w->tail[w->tail_next]);
    w->tail[w->tail_next] = copy;
    w->tail_next = (w->tail_next + 1) % MSR_TAIL_LINES;
    if (w->tail_count < MSR_TAIL_LINES)
        w->tail_count++;
}

/* What one read of a stream writes: a buffer for each sink it feeds, so
 * each gets one write per read. */
typedef struct emit {
    msr_stream_t *s;
    struct {
        msr_sink_t *sink; /* NULL: the stream does not go there */
        msr_buf_t buf;
        int tag; /* the sink's lines carry the worker's tag */
    } to[2];
    char stamp[40]; /* "<time> " with --timestamps, else "" */
    int board;      /* the terminal has a progress board */
    int row;        /* s's progress line changed its board row */
} emit_t;

/* The sink that holds the owner of fd's line (stdout and stderr share one
 * when they are the same file). */
static msr_sink_t *owner_sink(msr_output_t *o, msr_sink_t *k)
{
    return o->same_file && k == &o->term[1] ? &o->term[0] : k;
}

static void emit_init(emit_t *e, msr_stream_t *s)
{
    msr_worker_t *w = s->worker;
    memset(e, 0, sizeof *e);
    e->s = s;
    if (s->to_term) {
        e->to[0].sink = &w->output->term[s->is_err ? 1 : 0];
        e->to[0].tag = 1;
    }
    if (s->to_file && w->log_fd >= 0)
        e->to[1].sink = &w->log;
    if (w->output->timestamps) {
        msr_iso_time(msr_wall_time(), e->stamp, sizeof e->stamp - 1);
        strcat(e->stamp, " ");
    }
    e->board = s->to_term && w->output->board.active;
}

static void emit_prefix(emit_t *e, msr_buf_t *b, int tag)
{
    msr_worker_t *w = e->s->worker;
    msr_buf_append(b, e->stamp, strlen(e->stamp));
    if (tag)
        msr_buf_append(b, w->prefix, (size_t)w->prefix_len);
}

/* Makes the sink ready for a piece of s's current line: ends another
 * stream's line there (or writes over it, when both are progress lines),
 * starts s's line with its prefix, or starts it again after a carriage
 * return. A continuation of a line that another stream cut in two is
 * marked "..." after the prefix. */
static void sink_begin(emit_t *e, int i)
{
    msr_stream_t *s = e->s;
    msr_sink_t *k = owner_sink(s->worker->output, e->to[i].sink);
    msr_buf_t *b = &e->to[i].buf;
    msr_stream_t *o = k->owner;
    if (o == s) {
        if (s->cr_pending) {
            msr_buf_append(b, "\r", 1);
            emit_prefix(e, b, e->to[i].tag);
        }
        return;
    }
    if (o != NULL)
        msr_buf_append(b, s->cr_pending && o->cr ? "\r" : "\n", 1);
    emit_prefix(e, b, e->to[i].tag);
    if (s->in_line && !s->cr_pending)
        msr_buf_append(b, "...", 3);
    k->owner = s;
}

/* A piece of the current line (no '\n' or '\r' in it); progress: a '\r'
 * came or follows, so on a terminal with a board the piece goes to s's row
 * instead of the flow. */
static void emit_piece(emit_t *e, const char *text, size_t len, int progress)
{
    msr_stream_t *s = e->s;
    for (int i = 0; i < 2; i++) {
        if (e->to[i].sink == NULL)
            continue;
        if (i == 0 && e->board && progress) {
            msr_sink_t *k = owner_sink(s->worker->output, e->to[0].sink);
            if (k->owner == s) { /* its start went out as a plain line: end it */
                msr_buf_append(&e->to[0].buf, "\n", 1);
                k->owner = NULL;
            }
            e->row = 1;
            continue;
        }
        sink_begin(e, i);
        msr_buf_append(&e->to[i].buf, text, len);
    }
    size_t room = sizeof s->seg - s->seg_len;
    if (len > room)
        s->seg_whole = 0;
    memcpy(s->seg + s->seg_len, text, len < room ? len : room);
    s->seg_len += len < room ? len : room;
    s->in_line = 1;
    s->cr_pending = 0;
}

/* A carriage return: what follows starts the line again. */
static void emit_carriage(emit_t *e)
{
    msr_stream_t *s = e->s;
    s->cr = 1;
    s->cr_pending = 1;
    s->seg_len = 0;
    s->seg_whole = 1;
}

/* The end of the line. */
static void emit_line_end(emit_t *e)
{
    msr_stream_t *s = e->s;
    for (int i = 0; i < 2; i++) {
        if (e->to[i].sink == NULL)
            continue;
        if (i == 0 && e->board && s->cr) {
            /* a finished progress line: its row goes, its last state stays
             * on the screen as a line */
            msr_board_t *bd = &s->worker->output->board;
            msr_board_lock(bd);
            msr_board_remove(bd, s);
            msr_board_unlock(bd);
            e->row = 0;
            if (s->seg_len) {
                emit_prefix(e, &e->to[0].buf, e->to[0].tag);
                msr_buf_append(&e->to[0].buf, s->seg, s->seg_len);
                msr_buf_append(&e->to[0].buf, "\n", 1);
            }
            continue;
        }
        msr_sink_t *k = owner_sink(s->worker->output, e->to[i].sink);
        msr_buf_t *b = &e->to[i].buf;
        if (k->owner == s || !s->in_line) {
            /* an empty line, or the end of s's open one */
            int was_open = k->owner == s;
            s->cr_pending = 0;
            if (!was_open)
                sink_begin(e, i);
            msr_buf_append(b, "\n", 1);
            k->owner = NULL;
        } else if (s->cr && !s->cr_pending && s->seg_whole) {
            /* another stream wrote over this progress line: show its last
             * state once more, on a line of its own */
            s->cr_pending = 1;
            sink_begin(e, i);
            s->cr_pending = 0;
            msr_buf_append(b, s->seg, s->seg_len);
            msr_buf_append(b, "\n", 1);
            k->owner = NULL;
        }
        /* else its first part is there, ended by another stream's line */
    }
    if (s->keep_tail)
        tail_push(s->worker, s->seg, s->seg_len);
    if (s->worker->out_tail) /* a progress line's last state, as on the screen */
        msr_out_tail_push(s->worker->out_tail, s->seg, s->seg_len);
    msr_output_t *o = s->worker->output;
    if (o->metric && s->seg_whole && s->seg_len >= sizeof MSR_METRIC_PREFIX - 1 &&
        memcmp(s->seg, MSR_METRIC_PREFIX, sizeof MSR_METRIC_PREFIX - 1) == 0)
        o->metric(o->metric_arg, s->worker->rank, s->seg, s->seg_len);
    s->in_line = s->cr = s->cr_pending = 0;
    s->seg_len = 0;
    s->seg_whole = 1;
}

static void emit_flush(emit_t *e)
{
    msr_stream_t *s = e->s;
    for (int i = 0; i < 2; i++) {
        if (i == 0 && e->board && (e->to[0].buf.len || e->row)) {
            /* one write: rows erased, the new lines, rows drawn again (not
             * while a line is half written: they come with its end) */
            msr_output_t *o = s->worker->output;
            msr_board_t *bd = &o->board;
            msr_buf_t out = {0};
            msr_board_lock(bd);
            msr_board_erase(bd, &out);
            msr_buf_append(&out, e->to[0].buf.data, e->to[0].buf.len);
            if (e->row && s->cr && s->in_line) {
                msr_buf_t text = {0};
                emit_prefix(e, &text, e->to[0].tag);
                msr_buf_append(&text, s->seg, s->seg_len);
                if (msr_board_set(bd, s, text.data, text.len) != 0) {
                    /* no room: the line passes through as it is */
                    msr_buf_append(&out, text.data, text.len);
                    msr_buf_append(&out, "\n", 1);
                }
                msr_buf_cleanup(&text);
            }
            if (owner_sink(o, e->to[0].sink)->owner == NULL)
                msr_board_draw(bd, &out);
            msr_write_all(e->to[0].sink->fd, out.data, out.len);
            msr_board_unlock(bd);
            msr_buf_cleanup(&out);
            msr_buf_cleanup(&e->to[0].buf);
            continue;
        }
        if (e->to[i].buf.len)
            msr_write_all(e->to[i].sink->fd, e->to[i].buf.data, e->to[i].buf.len);
        msr_buf_cleanup(&e->to[i].buf);
    }
}

/* Forwards what data holds (plus everything when flush is set): complete
 * lines with the prefix; a progress line (one with '\r') piece by piece as
 * it comes; a line longer than MSR_LINE_HOLD_MAX without waiting for its
 * end. "\r\n" ends a line as "\n" does. Returns the bytes consumed; the
 * rest (an unfinished line, or a last '\r') waits for more. */
static size_t emit_data(msr_stream_t *s, const char *data, size_t len, int flush)
{
    emit_t e;
    emit_init(&e, s);
    size_t i = 0;
    while (i < len) {
        const char *p = data + i;
        size_t n = len - i, j = 0;
        while (j < n && p[j] != '\n' && p[j] != '\r')
            j++;
        if (j == n) {
            if (!s->cr && !s->in_line && !flush && n < MSR_LINE_HOLD_MAX)
                break; /* an unfinished line: wait for its end */
            emit_piece(&e, p, n, s->cr);
            i = len;
            break;
        }
        if (j > 0)
            emit_piece(&e, p, j, s->cr || p[j] == '\r');
        if (p[j] == '\n') {
            emit_line_end(&e);
            i += j + 1;
        } else if (j + 1 == n && !flush) {
            i += j; /* a last '\r': "\r\n" or a new start? */
            break;
        } else if (j + 1 < n && p[j + 1] == '\n') {
            emit_line_end(&e);
            i += j + 2;
        } else {
            emit_carriage(&e);
            i += j + 1;
        }
    }
    if (flush && s->in_line)
        emit_line_end(&e);
    emit_flush(&e);
    return i;
}

static void stream_close(msr_stream_t *s)
{
    if (s->fd < 0)
        return;
    if (s->partial.len || s->in_line) {
        emit_data(s, s->partial.data ? s->partial.data : "", s->partial.len, 1);
        msr_buf_clear(&s->partial);
    }
    msr_output_t *o = s->worker->output;
    for (int i = 0; i < 2; i++)
        if (o->term[i].owner == s)
            o->term[i].owner = NULL;
    msr_board_lock(&o->board);
    msr_board_remove(&o->board, s); /* its line was ended above; never kept */
    msr_board_unlock(&o->board);
    if (s->worker->log.owner == s)
        s->worker->log.owner = NULL;
    if (s->ev) {
        event_free(s->ev);
        s->ev = NULL;
    }
    close(s->fd);
    s->fd = -1;
}

/* Reads what is available; returns 0 at end of file or error (a
 * pseudo-terminal's EIO once the worker's side is closed), 1 otherwise. */
static int stream_read(msr_stream_t *s)
{
    char chunk[16384];
    for (int rounds = 0; rounds < 16; rounds++) {
        ssize_t n = read(s->fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 1;
        if (n <= 0)
            return 0;
        if (s->partial.len == 0) {
            size_t used = emit_data(s, chunk, (size_t)n, 0);
            if (used < (size_t)n)
                msr_buf_append(&s->partial, chunk + used, (size_t)n - used);
        } else {
            msr_buf_append(&s->partial, chunk, (size_t)n);
            size_t used = emit_data(s, s->partial.data, s->partial.len, 0);
            msr_buf_consume(&s->partial, used);
        }
    }
    return 1;
}

static void on_stream(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    msr_stream_t *s = arg;
    if (!stream_read(s))
        stream_close(s);
}

/* A pseudo-terminal: read until its end (EIO), at most MSR_PTY_DRAIN_MS. */
static void pty_drain(msr_stream_t *s)
{
    uint64_t until = msr_now_ns() + (uint64_t)MSR_PTY_DRAIN_MS * 1000000;
    for (;;) {
        if (!stream_read(s))
            return;
        uint64_t now = msr_now_ns();
        if (now >= until)
            return;
        struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
        int left_ms = (int)((until - now + 999999) / 1000000);
        if (poll(&pfd, 1, left_ms) == 0)
            return;
    }
}

void msr_worker_drain(msr_worker_t *w)
{
    msr_stream_t *streams[2] = {&w->out, &w->err};
    for (int i = 0; i < 2; i++) {
        msr_stream_t *s = streams[i];
        if (s->fd < 0)
            continue;
        /* The process is gone; a grandchild may still hold the pipe, so read
         * only what is there now. */
        if (w->pty && i == 0)
            pty_drain(s);
        else
            stream_read(s);
        stream_close(s);
    }
}

/* ---- spawning ---- */

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

/* The worker's environment: msrun's own, minus the variables msrun sets,
 * plus those. Built before fork so the child allocates nothing. */
static char **build_env(const msr_spawn_env_t *e, int local_rank)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = msr_calloc(n + 40, sizeof *envp);
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
        if (vars[i].text)
            snprintf(line, sizeof line, "%s=%s", vars[i].name, vars[i].text);
        else
            snprintf(line, sizeof line, "%s=%ld", vars[i].name, vars[i].value);
        if ((envp[k] = msr_strdup(line)) == NULL)
            goto err;
        k++;
    }
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

static msr_status_t stream_open(msr_stream_t *s, msr_worker_t *w, struct event_base *base, int fd,
                                int is_err)
{
    s->worker = w;
    s->fd = fd;
    s->is_err = is_err;
    s->seg_whole = 1;
    msr_fd_set_nonblock(fd, 1);
    s->ev = event_new(base, fd, EV_READ | EV_PERSIST, on_stream, s);
    if (s->ev == NULL || event_add(s->ev, NULL) != 0)
        return MSR_ERR_NO_MEMORY;
    return MSR_OK;
}

/* Opens worker w's log file in the run's log directory: this user's only
 * (0600), and never through a symbolic link planted in the log's place
 * (O_NOFOLLOW refuses it: ELOOP). A restart appends to the file of this
 * run; every generation's start is marked in it. */
static msr_status_t open_worker_log(msr_worker_t *w, const msr_spawn_env_t *e, const char *name)
{
    struct stat sb;
    w->log_fd = openat(e->log_dir_fd, name,
                       O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (w->log_fd < 0) {
        msr_err_set("cannot open log file %s/%s: %s", e->log_dir, name,
                    errno == ELOOP ? "it is a symbolic link" : strerror(errno));
        return MSR_ERR_SYSTEM;
    }
    if (fstat(w->log_fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) {
        msr_err_set("log file %s/%s is not a regular file of this user", e->log_dir, name);
        close(w->log_fd);
        w->log_fd = -1;
        return MSR_ERR_SYSTEM;
    }
    msr_fd_set_nonblock(w->log_fd, 0);
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
    msr_write_all(w->log_fd, line, (size_t)n);
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
    if (stream_open(&w->out, w, base, outp[0], 0) != MSR_OK ||
        (!e->pty && stream_open(&w->err, w, base, errp[0], 1) != MSR_OK)) {
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
    stream_close(&w->out);
    stream_close(&w->err);
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

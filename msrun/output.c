/* The workers' output: each stream's lines forwarded to the terminal and
 * the log files, tagged, stamped and kept (the last stderr lines, the
 * dashboard's ring), with progress lines drawn on the board. Event-loop
 * thread only. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/time.h"
#include "base/util.h"
#include "launcher/workers.h"
#include "rendezvous/progress.h"

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
        if (e->to[i].buf.len && i == 1) /* the log file, within --log_max_bytes */
            msr_worker_log_write(s->worker, e->to[i].buf.data, e->to[i].buf.len);
        else if (e->to[i].buf.len)
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

void msr_stream_close(msr_stream_t *s)
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
        msr_stream_close(s);
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
        msr_stream_close(s);
    }
}

msr_status_t msr_stream_open(msr_stream_t *s, msr_worker_t *w, struct event_base *base, int fd,
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

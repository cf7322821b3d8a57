/* The run's history file (history.h): JSON lines, bounded and rotated. */
#include "launcher/history.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/util.h"

struct msr_history {
    pthread_mutex_t lock;
    int dir_fd; /* a duplicate of the run's directory */
    int fd;     /* -1 once a write failed */
    int64_t size, max;
    uint64_t lines, rotations;
    msr_buf_t line;
};

static int open_file(int dir_fd)
{
    return openat(dir_fd, MSR_HISTORY_FILE, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC,
                  0600);
}

msr_status_t msr_history_open(int dir_fd, int64_t max_bytes, msr_history_t **history_p)
{
    msr_history_t *h = msr_calloc(1, sizeof *h);
    if (h == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "no memory for the history");
    h->fd = h->dir_fd = -1;
    struct stat st;
    if ((h->dir_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0)) < 0 || (h->fd = open_file(dir_fd)) < 0 ||
        fstat(h->fd, &st) != 0) {
        msr_status_t s =
            msr_err(MSR_ERR_IO, "cannot open %s: %s", MSR_HISTORY_FILE, strerror(errno));
        if (h->fd >= 0)
            close(h->fd);
        if (h->dir_fd >= 0)
            close(h->dir_fd);
        msr_free(h);
        return s;
    }
    h->size = st.st_size;
    h->max = max_bytes > 0 ? max_bytes : MSR_HISTORY_MAX_BYTES;
    pthread_mutex_init(&h->lock, NULL);
    *history_p = h;
    return MSR_OK;
}

/* A finite number as JSON reads it; anything else as null. */
static msr_status_t json_num(msr_buf_t *b, double v)
{
    return isfinite(v) ? msr_buf_printf(b, "%.9g", v) : msr_buf_append(b, "null", 4);
}

/* A scalar's name (rendezvous/progress.h allows no quote, backslash or
 * control character; any such byte is dropped all the same). */
static msr_status_t json_name(msr_buf_t *b, const char *s)
{
    msr_status_t st = msr_buf_append(b, "\"", 1);
    for (; *s && st == MSR_OK; s++)
        if (*s != '"' && *s != '\\' && (unsigned char)*s >= 0x20)
            st = msr_buf_append(b, s, 1);
    return st == MSR_OK ? msr_buf_append(b, "\"", 1) : st;
}

/* r as one line into b: MSR_OK, or out of memory (b then holds a part). */
static msr_status_t format(msr_buf_t *b, const msr_history_rec_t *r)
{
    msr_buf_clear(b);
    msr_status_t st = msr_buf_printf(
        b, "{\"t\":%.3f,\"gen\":%d,\"node\":%d,\"rank\":%d,\"step\":%lld,\"step_ms\":",
        isfinite(r->time) ? r->time : 0.0, r->generation, r->node_rank, r->rank,
        (long long)r->step);
    if (st == MSR_OK)
        st = json_num(b, isfinite(r->step_time) && r->step_time > 0 ? r->step_time * 1e3 : NAN);
    if (st == MSR_OK)
        st = msr_buf_append(b, ",\"scalars\":{", 12);
    int first = 1;
    for (size_t i = 0; i < r->n && st == MSR_OK; i++) {
        if (r->names[i] == NULL || !isfinite(r->values[i]))
            continue;
        if (!first)
            st = msr_buf_append(b, ",", 1);
        first = 0;
        if (st == MSR_OK)
            st = json_name(b, r->names[i]);
        if (st == MSR_OK)
            st = msr_buf_append(b, ":", 1);
        if (st == MSR_OK)
            st = json_num(b, r->values[i]);
    }
    return st == MSR_OK ? msr_buf_append(b, "}}\n", 3) : st;
}

/* The file is full: it becomes MSR_HISTORY_FILE_OLD and a new one starts.
 * Under h->lock. */
static msr_status_t rotate(msr_history_t *h)
{
    if (renameat(h->dir_fd, MSR_HISTORY_FILE, h->dir_fd, MSR_HISTORY_FILE_OLD) != 0)
        return msr_err(MSR_ERR_IO, "cannot rotate %s: %s", MSR_HISTORY_FILE, strerror(errno));
    close(h->fd);
    if ((h->fd = open_file(h->dir_fd)) < 0)
        return msr_err(MSR_ERR_IO, "cannot open a new %s: %s", MSR_HISTORY_FILE, strerror(errno));
    h->size = 0;
    h->rotations++;
    return MSR_OK;
}

void msr_history_add(msr_history_t *h, const msr_history_rec_t *r)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->lock);
    if (h->fd < 0)
        goto out;
    if (format(&h->line, r) != MSR_OK) /* out of memory: this record is lost */
        goto out;
    msr_status_t st = MSR_OK;
    if (h->size > 0 && h->size + (int64_t)h->line.len > h->max)
        st = rotate(h);
    if (st == MSR_OK && msr_write_all(h->fd, h->line.data, h->line.len) != MSR_OK)
        st = msr_err(MSR_ERR_IO, "cannot write %s: %s", MSR_HISTORY_FILE, strerror(errno));
    if (st != MSR_OK) {
        MSR_WARN("the run's history stops: %s", msr_err_msg());
        if (h->fd >= 0)
            close(h->fd);
        h->fd = -1;
        goto out;
    }
    h->size += (int64_t)h->line.len;
    h->lines++;
out:
    pthread_mutex_unlock(&h->lock);
}

uint64_t msr_history_lines(msr_history_t *h)
{
    pthread_mutex_lock(&h->lock);
    uint64_t n = h->lines;
    pthread_mutex_unlock(&h->lock);
    return n;
}

uint64_t msr_history_rotations(msr_history_t *h)
{
    pthread_mutex_lock(&h->lock);
    uint64_t n = h->rotations;
    pthread_mutex_unlock(&h->lock);
    return n;
}

void msr_history_close(msr_history_t *h)
{
    if (h == NULL)
        return;
    if (h->fd >= 0)
        close(h->fd);
    close(h->dir_fd);
    msr_buf_cleanup(&h->line);
    pthread_mutex_destroy(&h->lock);
    msr_free(h);
}

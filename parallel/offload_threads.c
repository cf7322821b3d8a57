/* The offload store's thread-pool engine: pread and pwrite on a few
 * threads, oldest request first (see offload_impl.h). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "parallel/offload_impl.h"

/* Two threads keep a read and a write moving together, which is what a
 * step has in flight at once (a read ahead, a write behind). */
#define THREADS 2

enum { SLOT_IDLE, SLOT_QUEUED, SLOT_RUNNING, SLOT_DONE };

typedef struct slot {
    int state, write;
    void *buf;
    size_t len, done;
    off_t at;
    int err;
    uint64_t seq; /* submission order: the oldest queued runs first */
} slot_t;

struct msr_offload_engine {
    msr_offload_engine_io_t io; /* first */
    int nthreads, stop;
    uint64_t seq;
    pthread_mutex_t mu;
    pthread_cond_t work; /* a slot queued, or stop */
    pthread_cond_t done; /* a slot done */
    pthread_t th[THREADS];
    slot_t slots[];
};

size_t msr_offload_rw(int fd, int write, void *buf, size_t len, off_t at, int *err_p)
{
    size_t done = 0;
    *err_p = 0;
    while (done < len) {
        ssize_t r = write ? pwrite(fd, (char *)buf + done, len - done, at + (off_t)done)
                          : pread(fd, (char *)buf + done, len - done, at + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            *err_p = errno;
            break;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return done;
}

void *msr_offload_engine_calloc(size_t head, int fd, int nslots, size_t slot)
{
    msr_offload_engine_io_t *e = msr_calloc(1, head + (size_t)nslots * slot);
    if (e == NULL) {
        (void)msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for an engine");
        return NULL;
    }
    e->fd = fd;
    e->nslots = nslots;
    return e;
}

/* The oldest queued slot, or NULL. Under mu. */
static slot_t *oldest(msr_offload_engine_t *e)
{
    slot_t *best = NULL;
    for (int s = 0; s < e->io.nslots; s++)
        if (e->slots[s].state == SLOT_QUEUED && (best == NULL || e->slots[s].seq < best->seq))
            best = &e->slots[s];
    return best;
}

static void *worker(void *arg)
{
    msr_offload_engine_t *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        slot_t *s = oldest(e);
        if (s == NULL) {
            if (e->stop)
                break;
            pthread_cond_wait(&e->work, &e->mu);
            continue;
        }
        s->state = SLOT_RUNNING;
        pthread_mutex_unlock(&e->mu);
        int err;
        size_t done = msr_offload_rw(e->io.fd, s->write, s->buf, s->len, s->at, &err);
        pthread_mutex_lock(&e->mu);
        s->done = done;
        s->err = err;
        s->state = SLOT_DONE;
        pthread_cond_broadcast(&e->done);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void threads_destroy(msr_offload_engine_t *e);

static msr_status_t threads_create(int fd, int nslots, msr_offload_engine_t **eng_p)
{
    msr_offload_engine_t *e = msr_offload_engine_calloc(sizeof *e, fd, nslots, sizeof(slot_t));
    if (e == NULL)
        return MSR_ERR_NO_MEMORY;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->done, NULL);
    for (; e->nthreads < THREADS; e->nthreads++) {
        int rc = pthread_create(&e->th[e->nthreads], NULL, worker, e);
        if (rc != 0) {
            threads_destroy(e);
            return msr_err(MSR_ERR_SYSTEM, "offload: cannot start an I/O thread: %s", strerror(rc));
        }
    }
    *eng_p = e;
    return MSR_OK;
}

static void threads_submit(msr_offload_engine_t *e, int slot, int write, void *buf, size_t len,
                           off_t at)
{
    pthread_mutex_lock(&e->mu);
    e->slots[slot] = (slot_t){SLOT_QUEUED, write, buf, len, 0, at, 0, e->seq++};
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
}

static void threads_wait(msr_offload_engine_t *e, int slot, size_t *done_p, int *err_p)
{
    slot_t *s = &e->slots[slot];
    pthread_mutex_lock(&e->mu);
    while (s->state == SLOT_QUEUED || s->state == SLOT_RUNNING)
        pthread_cond_wait(&e->done, &e->mu);
    *done_p = s->done;
    *err_p = s->err;
    s->state = SLOT_IDLE;
    pthread_mutex_unlock(&e->mu);
}

static void threads_destroy(msr_offload_engine_t *e)
{
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1; /* the workers finish what is queued, then leave */
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
    for (int t = 0; t < e->nthreads; t++)
        pthread_join(e->th[t], NULL);
    pthread_cond_destroy(&e->done);
    pthread_cond_destroy(&e->work);
    pthread_mutex_destroy(&e->mu);
    msr_free(e);
}

const msr_offload_engine_ops_t msr_offload_threads_ops = {
    "threads", threads_create, threads_submit, threads_wait, threads_destroy,
};

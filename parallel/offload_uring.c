/* The offload store's io_uring engine (liburing; see offload_impl.h): one
 * ring, a submission per request, completions matched to slots. */
#include <errno.h>
#include <liburing.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "parallel/offload_impl.h"

typedef struct slot {
    int busy, write;
    void *buf;
    size_t len;
    off_t at;
    int res; /* the completion's: bytes moved or -errno */
    int completed;
} slot_t;

struct msr_offload_engine {
    msr_offload_engine_io_t io; /* first */
    int inflight;
    struct io_uring ring;
    slot_t slots[];
};

static msr_status_t uring_create(int fd, int nslots, msr_offload_engine_t **eng_p)
{
    msr_offload_engine_t *e = msr_offload_engine_calloc(sizeof *e, fd, nslots, sizeof(slot_t));
    if (e == NULL)
        return MSR_ERR_NO_MEMORY;
    int rc = io_uring_queue_init((unsigned)nslots, &e->ring, 0);
    if (rc < 0) {
        msr_free(e);
        return msr_err(MSR_ERR_UNSUPPORTED, "offload: io_uring is not available here: %s",
                       strerror(-rc));
    }
    *eng_p = e;
    return MSR_OK;
}

/* Queues slot's request on the ring and submits it. */
static int queue(msr_offload_engine_t *e, int slot)
{
    slot_t *s = &e->slots[slot];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
    if (sqe == NULL)
        return -EBUSY; /* cannot happen: the ring has a place per slot */
    if (s->write)
        io_uring_prep_write(sqe, e->io.fd, s->buf, (unsigned)s->len, (uint64_t)s->at);
    else
        io_uring_prep_read(sqe, e->io.fd, s->buf, (unsigned)s->len, (uint64_t)s->at);
    io_uring_sqe_set_data(sqe, s);
    int rc = io_uring_submit(&e->ring);
    return rc < 0 ? rc : 0;
}

static void uring_submit(msr_offload_engine_t *e, int slot, int write, void *buf, size_t len,
                         off_t at)
{
    slot_t *s = &e->slots[slot];
    *s = (slot_t){1, write, buf, len, at, 0, 0};
    int rc = queue(e, slot);
    if (rc < 0) { /* reported by wait */
        s->res = rc;
        s->completed = 1;
        return;
    }
    e->inflight++;
}

/* Reaps one completion into its slot. */
static void reap(msr_offload_engine_t *e)
{
    struct io_uring_cqe *cqe;
    int rc;
    while ((rc = io_uring_wait_cqe(&e->ring, &cqe)) == -EINTR)
        ;
    if (rc < 0) { /* the ring itself failed: every slot in flight fails */
        for (int s = 0; s < e->io.nslots; s++)
            if (e->slots[s].busy && !e->slots[s].completed)
                e->slots[s].res = rc, e->slots[s].completed = 1;
        e->inflight = 0;
        return;
    }
    slot_t *s = io_uring_cqe_get_data(cqe);
    s->res = cqe->res;
    s->completed = 1;
    e->inflight--;
    io_uring_cqe_seen(&e->ring, cqe);
}

static void uring_wait(msr_offload_engine_t *e, int slot, size_t *done_p, int *err_p)
{
    slot_t *s = &e->slots[slot];
    while (s->busy && !s->completed)
        reap(e);
    size_t done = s->res > 0 ? (size_t)s->res : 0;
    int err = s->res < 0 ? -s->res : 0;
    if (err == 0 && done > 0 && done < s->len) /* a partial transfer: finish it plainly */
        done += msr_offload_rw(e->io.fd, s->write, (char *)s->buf + done, s->len - done,
                               s->at + (off_t)done, &err);
    s->busy = 0;
    *done_p = done;
    *err_p = err;
}

static void uring_destroy(msr_offload_engine_t *e)
{
    if (e == NULL)
        return;
    while (e->inflight > 0)
        reap(e);
    io_uring_queue_exit(&e->ring);
    msr_free(e);
}

const msr_offload_engine_ops_t msr_offload_uring_ops = {
    "uring", uring_create, uring_submit, uring_wait, uring_destroy,
};

/* The UCX collectives that run in rounds of exchanges: the dissemination
 * barrier, point to point, the direct exchange of allreduce, reduce-scatter
 * and allgather (everyone with everyone in one round), allreduce by
 * recursive doubling, and alltoall(v) pairwise with a window of steps in
 * flight. Each is a step function (coll.c says how they resume); every
 * reduction folds in rank order. */
#include <stdio.h>
#include <string.h>

#include "comm/reduce.h"
#include "comm/ucx/coll_impl.h"

/* ---- barrier: dissemination, ceil(log2 n) rounds ---- */

msr_status_t ucx_step_barrier(ucx_req_t *r)
{
    ucx_barrier_t *b = &r->barrier;
    msr_status_t st;
    switch (b->phase) {
    case UCX_BARRIER_START:
        break;
    case UCX_BARRIER_ROUND:
        goto round;
    }
    for (b->round = 0, b->dist = 1; b->dist < r->n; b->dist <<= 1, b->round++) {
        st = ucx_op_send(r, ucx_next_op(r), ucx_mod(r->me + b->dist, r->n), NULL, 0, b->round);
        if (st != MSR_OK)
            return st;
        st = ucx_op_recv(r, ucx_next_op(r), ucx_mod(r->me - b->dist, r->n), NULL, 0, b->round);
        if (st != MSR_OK)
            return st;
        b->phase = UCX_BARRIER_ROUND;
    round:
        st = ucx_ops_wait(r);
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

/* ---- point to point ---- */

msr_status_t ucx_step_send(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (r->direct.phase == UCX_DIRECT_POST) {
        msr_status_t st = ucx_op_send_tag(r, ucx_next_op(r), a->root, a->sendbuf, r->bytes,
                                          ucx_tag(UCX_TAG_P2P, r->uc->id, r->me, (uint64_t)a->tag));
        if (st != MSR_OK)
            return st;
        r->direct.phase = UCX_DIRECT_WAIT;
    }
    return ucx_ops_wait(r);
}

/* From a->root, or from any member (MSR_COMM_PEER_ANY: the sender's bits
 * of the tag are masked out, and the matched message's tell a->src who sent
 * it, a rank of this group). */
msr_status_t ucx_step_recv(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    int any = a->any;
    if (r->direct.phase == UCX_DIRECT_POST) {
        msr_status_t st =
            ucx_op_recv_tag(r, ucx_next_op(r), a->root, a->recvbuf, r->bytes,
                            ucx_tag(UCX_TAG_P2P, r->uc->id, any ? 0 : a->root, (uint64_t)a->tag));
        if (st != MSR_OK)
            return st;
        r->direct.phase = UCX_DIRECT_WAIT;
    }
    msr_status_t st = ucx_ops_wait(r);
    if (st == MSR_OK && any && a->src != NULL)
        *a->src = ucx_tag_src(r->ops[0].sender_tag);
    return st;
}

/* ---- direct: everyone exchanges with everyone in one round ---- */

/* Folds n blocks in rank order into dst: dst = x0 op x1 op ... op x(n-1),
 * where block me is own and the others are in slots (stride bytes). */
static void fold_in_order(ucx_req_t *r, void *dst, const void *own, const char *slots,
                          size_t stride, uint64_t count)
{
    const msr_coll_args_t *a = &r->pub.args;
    const void *x0 = r->me == 0 ? own : slots;
    const void *x1 = r->me == 1 ? own : slots + stride;
    msr_reduce(a->op, a->dtype, dst, x0, x1, count);
    for (int j = 2; j < r->n; j++)
        msr_reduce(a->op, a->dtype, dst, dst, j == r->me ? own : slots + (size_t)j * stride, count);
    msr_reduce_finish(a->op, a->dtype, dst, count, r->n);
}

/* Posts one direct exchange: sends first (they are what the others wait
 * for), to every other rank j r->bytes from send + j * send_stride (stride
 * 0: the same vector to all), then receives, from every other rank j
 * r->bytes into recv + j * recv_stride. */
static msr_status_t post_direct(ucx_req_t *r, const void *send, size_t send_stride, void *recv,
                                size_t recv_stride)
{
    msr_status_t st;
    for (int d = 1; d < r->n; d++) {
        int j = ucx_mod(r->me + d, r->n);
        st = ucx_op_send(r, ucx_next_op(r), j, ucx_at(send, (uint64_t)j, send_stride), r->bytes, 0);
        if (st != MSR_OK)
            return st;
    }
    for (int d = 1; d < r->n; d++) {
        int j = ucx_mod(r->me - d, r->n);
        st = ucx_op_recv(r, ucx_next_op(r), j, ucx_at(recv, (uint64_t)j, recv_stride), r->bytes, 0);
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

msr_status_t ucx_step_allreduce_direct(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    msr_status_t st;
    if (r->direct.phase == UCX_DIRECT_POST) {
        /* Slot j gets rank j's vector; slot me a copy of ours when in place. */
        st = post_direct(r, a->sendbuf, 0, r->scratch, r->bytes);
        if (st != MSR_OK)
            return st;
        if (a->in_place)
            memcpy(r->scratch + (size_t)r->me * r->bytes, a->recvbuf, r->bytes);
        r->direct.phase = UCX_DIRECT_WAIT;
    }
    st = ucx_ops_wait(r);
    if (st != MSR_OK)
        return st;
    fold_in_order(r, a->recvbuf,
                  a->in_place ? (const void *)(r->scratch + (size_t)r->me * r->bytes) : a->sendbuf,
                  r->scratch, r->bytes, a->count);
    return MSR_OK;
}

msr_status_t ucx_step_reduce_scatter_direct(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    msr_status_t st;
    if (r->direct.phase == UCX_DIRECT_POST) {
        st = post_direct(r, a->sendbuf, r->bytes, r->scratch, r->bytes);
        if (st != MSR_OK)
            return st;
        if (a->in_place && r->bytes > 0) /* count 0 may come with NULL buffers */
            memcpy(r->scratch + (size_t)r->me * r->bytes, a->recvbuf, r->bytes);
        r->direct.phase = UCX_DIRECT_WAIT;
    }
    st = ucx_ops_wait(r);
    if (st != MSR_OK)
        return st;
    fold_in_order(r, a->recvbuf,
                  a->in_place ? (const void *)(r->scratch + (size_t)r->me * r->bytes)
                              : ucx_at(a->sendbuf, (uint64_t)r->me * a->count, r->es),
                  r->scratch, r->bytes, a->count);
    return MSR_OK;
}

msr_status_t ucx_step_allgather_direct(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    msr_status_t st;
    if (r->direct.phase == UCX_DIRECT_POST) {
        st = post_direct(r, a->sendbuf, 0, a->recvbuf, r->bytes);
        if (st != MSR_OK)
            return st;
        if (!a->in_place && r->bytes)
            memcpy(ucx_at(a->recvbuf, (uint64_t)r->me * a->count, r->es), a->sendbuf, r->bytes);
        r->direct.phase = UCX_DIRECT_WAIT;
    }
    return ucx_ops_wait(r);
}

/* ---- allreduce: recursive doubling ----
 * The first 2*rem ranks fold pairwise into rem ranks, the remaining power of
 * two exchange whole vectors log2 times (each pair computes lower op upper,
 * so both get the same bits), and the folded ranks get the result back. */

static int rd_real(const ucx_rd_t *rd, int newrank)
{
    return newrank < rd->rem ? newrank * 2 + 1 : newrank + rd->rem;
}

msr_status_t ucx_step_allreduce_rd(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_rd_t *rd = &r->rd;
    void *acc = a->recvbuf;
    const int folds = r->me < 2 * rd->rem; /* one of a pair folded in and out */
    int peer;
    msr_status_t st;
    switch (rd->phase) {
    case UCX_RD_START:
        break;
    case UCX_RD_FOLD_IN:
        goto fold_in;
    case UCX_RD_EXCHANGE:
        goto exchange;
    case UCX_RD_FOLD_OUT:
        goto fold_out;
    }
    if (!a->in_place && r->bytes)
        memcpy(acc, a->sendbuf, r->bytes);
    if (folds) {
        /* the even one of a pair hands its vector to the odd one */
        if (r->me % 2 == 0) {
            st = ucx_op_send(r, ucx_next_op(r), r->me + 1, acc, r->bytes, 0);
            rd->newrank = -1;
        } else {
            st = ucx_op_recv(r, ucx_next_op(r), r->me - 1, r->scratch, r->bytes, 0);
            rd->newrank = r->me / 2;
        }
        if (st != MSR_OK)
            return st;
        rd->phase = UCX_RD_FOLD_IN;
    fold_in:
        st = ucx_ops_wait(r);
        if (st != MSR_OK)
            return st;
        if (rd->newrank >= 0)
            msr_reduce(a->op, a->dtype, acc, r->scratch, acc, a->count);
    } else {
        rd->newrank = r->me - rd->rem;
    }
    if (rd->newrank >= 0) {
        for (rd->mask = 1, rd->round = 1; rd->mask < rd->p2; rd->mask <<= 1, rd->round++) {
            peer = rd_real(rd, rd->newrank ^ rd->mask);
            st = ucx_op_send(r, ucx_next_op(r), peer, acc, r->bytes, rd->round);
            if (st != MSR_OK)
                return st;
            st = ucx_op_recv(r, ucx_next_op(r), peer, r->scratch, r->bytes, rd->round);
            if (st != MSR_OK)
                return st;
            rd->phase = UCX_RD_EXCHANGE;
        exchange:
            st = ucx_ops_wait(r);
            if (st != MSR_OK)
                return st;
            if ((rd->newrank ^ rd->mask) < rd->newrank)
                msr_reduce(a->op, a->dtype, acc, r->scratch, acc, a->count);
            else
                msr_reduce(a->op, a->dtype, acc, acc, r->scratch, a->count);
        }
        msr_reduce_finish(a->op, a->dtype, acc, a->count, r->n);
    }
    if (folds) {
        if (r->me % 2 == 1)
            st = ucx_op_send(r, ucx_next_op(r), r->me - 1, acc, r->bytes, UCX_TAG_PHASES - 1);
        else
            st = ucx_op_recv(r, ucx_next_op(r), r->me + 1, acc, r->bytes, UCX_TAG_PHASES - 1);
        if (st != MSR_OK)
            return st;
        rd->phase = UCX_RD_FOLD_OUT;
    fold_out:
        st = ucx_ops_wait(r);
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

/* ---- alltoall(v): pairwise, a window of steps in flight ---- */

static void a2a_block(const ucx_req_t *r, int peer, int sending, const char **buf, size_t *len)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (a->coll == MSR_COLL_ALLTOALLV) {
        const uint64_t *v = a->v + 4 * (size_t)peer;
        if (sending) {
            *buf = ucx_at(a->sendbuf, v[1], r->es);
            *len = v[0] * r->es;
        } else {
            *buf = ucx_at(a->recvbuf, v[3], r->es);
            *len = v[2] * r->es;
        }
        return;
    }
    const void *src = a->in_place ? (const void *)r->scratch : a->sendbuf;
    *buf = ucx_at(sending ? src : a->recvbuf, (uint64_t)peer * a->count, r->es);
    *len = r->bytes;
}

msr_status_t ucx_step_alltoall(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_a2a_t *x = &r->a2a;
    const int w = x->window;
    const char *buf;
    size_t len;
    if (!x->started) {
        x->started = 1;
        if (a->in_place && r->bytes != 0)
            memcpy(r->scratch, a->recvbuf, r->bytes * (size_t)r->n);
        const char *src;
        size_t slen, rlen;
        a2a_block(r, r->me, 1, &src, &slen);
        a2a_block(r, r->me, 0, &buf, &rlen);
        if (slen != rlen) {
            snprintf(r->pub.error, sizeof r->pub.error,
                     "%s: sends %zu bytes to itself but expects %zu", r->algo, slen, rlen);
            return MSR_ERR_INVALID_ARG;
        }
        if (slen && src != buf)
            memmove((char *)buf, src, slen);
        x->posted = x->done = 1;
    }
    int busy = 1;
    while (busy) {
        busy = 0;
        while (x->posted < r->n && x->posted - x->done < w) {
            int to = ucx_mod(r->me + x->posted, r->n), from = ucx_mod(r->me - x->posted, r->n);
            ucx_op_t *ops = &r->ops[2 * (size_t)(x->posted % w)];
            a2a_block(r, to, 1, &buf, &len);
            msr_status_t st = ucx_op_send(r, &ops[1], to, buf, len, 0);
            if (st != MSR_OK)
                return st;
            a2a_block(r, from, 0, &buf, &len);
            st = ucx_op_recv(r, &ops[0], from, (char *)buf, len, 0);
            if (st != MSR_OK)
                return st;
            x->posted++;
        }
        if (x->done < x->posted) {
            ucx_op_t *ops = &r->ops[2 * (size_t)(x->done % w)];
            int d0 = ucx_op_test(r, &ops[0]), d1 = ucx_op_test(r, &ops[1]);
            if (r->err != MSR_OK)
                return r->err;
            if (d0 && d1) {
                x->done++;
                busy = 1;
            }
        }
    }
    return x->done == r->n ? MSR_OK : MSR_IN_PROGRESS;
}

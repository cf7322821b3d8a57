/* comm_worker's p2p mode: send/recv, isend/irecv, tags, truncation and a
 * dup with its own worker. */
#include "comm_worker.h"

/* ---- point to point ---- */

void cw_expect_cut(msr_status_t st, int from, size_t sent, size_t room)
{
    if (st != MSR_ERR_TRUNCATED)
        fail("%zu bytes into %zu: %s, expected MSR_ERR_TRUNCATED", sent, room, msr_status_name(st));
    char want[160];
    if (sent > room)
        snprintf(want, sizeof want,
                 "the message from rank %d has %zu bytes, more than the "
                 "buffer's %zu",
                 from, sent, room);
    else
        snprintf(want, sizeof want,
                 "the message from rank %d has %zu bytes, fewer than the %zu "
                 "expected",
                 from, sent, room);
    if (strstr(msr_last_error(), want) == NULL)
        fail("%zu bytes into %zu: the error does not say \"%s\"", sent, room, want);
    /* the operation named once: "recv: the message ..." */
    if (strstr(msr_last_error(), "recv: the message") == NULL ||
        strstr(msr_last_error(), "recv: recv:") != NULL)
        fail("%zu bytes into %zu: the error names its operation other than once: %s", sent, room,
             msr_last_error());
    g_checks++;
}

/* The message sizes (bytes) sent to the right and the receive buffers
 * that do not fit them: longer by a little (small messages, eager), into
 * none, shorter, and longer past the eager sizes (rendezvous). */
static const size_t cut_sent[] = {16, 8, 8, (1u << 20) + 8, 1u << 20};
static const size_t cut_room[] = {8, 0, 16, 1u << 20, (1u << 20) + 8};

/* Each size pair through recv and irecv, then a message of exactly the
 * buffer's size still arrives whole. */
static void p2p_lengths(msr_comm_t *c)
{
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    int right = (me + 1) % n, left = (me + n - 1) % n;
    size_t most = (1u << 20) + 8;
    unsigned char *out = xmalloc(most), *in = xmalloc(most);
    memset(out, me + 1, most);
    for (int nb = 0; nb < 2; nb++)
        for (size_t k = 0; k < sizeof cut_sent / sizeof cut_sent[0]; k++) {
            snprintf(g_case, sizeof g_case, "p2p lengths: %zu bytes into %zu, %s", cut_sent[k],
                     cut_room[k], nb ? "irecv" : "recv");
            msr_comm_req_t *s = NULL, *q = NULL;
            OK(msr_comm_isend(c, out, cut_sent[k], MSR_DTYPE_U8, right, 11, &s));
            msr_status_t st;
            if (nb) {
                OK(msr_comm_irecv(c, in, cut_room[k], MSR_DTYPE_U8, left, 11, &q));
                st = msr_comm_wait(q);
            } else {
                st = msr_comm_recv(c, in, cut_room[k], MSR_DTYPE_U8, left, 11);
            }
            cw_expect_cut(st, left, cut_sent[k], cut_room[k]);
            OK(msr_comm_wait(s));
            OK(msr_comm_barrier(c));
        }
    snprintf(g_case, sizeof g_case, "p2p lengths: at the bound");
    memset(in, 0, most);
    msr_comm_req_t *q[2];
    OK(msr_comm_irecv(c, in, most, MSR_DTYPE_U8, left, 11, &q[0]));
    OK(msr_comm_isend(c, out, most, MSR_DTYPE_U8, right, 11, &q[1]));
    OK(msr_comm_wait_all(q, 2));
    for (size_t i = 0; i < most; i++)
        if (in[i] != (unsigned char)(left + 1))
            fail("at the bound: byte %zu is %u", i, in[i]);
    free(out);
    free(in);
}

void cw_mode_p2p(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    int right = (me + 1) % n, left = (me + n - 1) % n;
    snprintf(g_case, sizeof g_case, "p2p ring");
    for (size_t count = 1; count <= (1u << 20); count *= 16) {
        int64_t *s = xmalloc(count * 8), *r = xmalloc(count * 8);
        for (size_t i = 0; i < count; i++)
            s[i] = (int64_t)(me * 1000003 + (int64_t)i);
        msr_comm_req_t *q[2];
        OK(msr_comm_irecv(world, r, count, MSR_DTYPE_I64, left, 5, &q[0]));
        OK(msr_comm_isend(world, s, count, MSR_DTYPE_I64, right, 5, &q[1]));
        OK(msr_comm_wait_all(q, 2));
        for (size_t i = 0; i < count; i++)
            if (r[i] != (int64_t)(left * 1000003 + (int64_t)i))
                fail("p2p %zu elements: wrong value at %zu", count, i);
        free(s);
        free(r);
    }
    /* tags keep messages apart; same tag keeps order */
    snprintf(g_case, sizeof g_case, "p2p tags");
    int v[4] = {me, me + 100, me + 200, me + 300}, got[4] = {0};
    msr_comm_req_t *q[8];
    OK(msr_comm_irecv(world, &got[0], 1, MSR_DTYPE_I32, left, 7, &q[0]));
    OK(msr_comm_irecv(world, &got[1], 1, MSR_DTYPE_I32, left, MSR_COMM_TAG_MAX, &q[1]));
    OK(msr_comm_irecv(world, &got[2], 1, MSR_DTYPE_I32, left, 7, &q[2]));
    OK(msr_comm_irecv(world, &got[3], 1, MSR_DTYPE_I32, left, 0, &q[3]));
    OK(msr_comm_isend(world, &v[3], 1, MSR_DTYPE_I32, right, 0, &q[4]));
    OK(msr_comm_isend(world, &v[0], 1, MSR_DTYPE_I32, right, 7, &q[5]));
    OK(msr_comm_isend(world, &v[1], 1, MSR_DTYPE_I32, right, MSR_COMM_TAG_MAX, &q[6]));
    OK(msr_comm_isend(world, &v[2], 1, MSR_DTYPE_I32, right, 7, &q[7]));
    OK(msr_comm_wait_all(q, 8));
    if (got[0] != left || got[1] != left + 100 || got[2] != left + 200 || got[3] != left + 300)
        fail("tags: got %d %d %d %d", got[0], got[1], got[2], got[3]);
    /* receives of a length other than the message's fail, naming the
     * sender and both sizes; the communicator stays usable */
    p2p_lengths(world);
    /* bad arguments change nothing */
    snprintf(g_case, sizeof g_case, "bad arguments");
    int32_t big[4] = {1, 2, 3, 4}, small[2];
    if (msr_comm_send(world, big, 1, MSR_DTYPE_I32, n, 0) != MSR_ERR_INVALID_ARG ||
        msr_comm_send(world, big, 1, MSR_DTYPE_I32, 0, -1) != MSR_ERR_INVALID_ARG ||
        msr_comm_allreduce(world, big, small, 1, (msr_dtype_t)42, MSR_OP_SUM) !=
            MSR_ERR_INVALID_ARG ||
        msr_comm_allreduce(world, big, small, 1, MSR_DTYPE_I32, (msr_op_t)9) !=
            MSR_ERR_INVALID_ARG ||
        msr_comm_broadcast(world, big, 1, MSR_DTYPE_I32, -1) != MSR_ERR_INVALID_ARG ||
        msr_comm_allreduce(world, NULL, small, 1, MSR_DTYPE_I32, MSR_OP_SUM) !=
            MSR_ERR_INVALID_ARG ||
        msr_comm_allreduce(world, big, small, UINT64_MAX / 2, MSR_DTYPE_I32, MSR_OP_SUM) !=
            MSR_ERR_OVERFLOW ||
        msr_comm_split(world, -5, 0, &(msr_comm_t *){NULL}) != MSR_ERR_INVALID_ARG)
        fail("a bad argument was not refused");
    if (msr_comm_status(world) != MSR_OK)
        fail("bad arguments broke the communicator");
    /* dup with its own worker, used alongside the world */
    snprintf(g_case, sizeof g_case, "dup own worker");
    msr_comm_t *own = NULL;
    OK(msr_comm_dup(world, MSR_COMM_OWN_WORKER, &own));
    int64_t x = me + 1, sum = 0, sum2 = 0;
    msr_comm_req_t *q2[2];
    OK(msr_comm_iallreduce(own, &x, &sum, 1, MSR_DTYPE_I64, MSR_OP_SUM, &q2[0]));
    OK(msr_comm_iallreduce(world, &x, &sum2, 1, MSR_DTYPE_I64, MSR_OP_SUM, &q2[1]));
    OK(msr_comm_wait(q2[1]));
    OK(msr_comm_wait(q2[0]));
    if (sum != (int64_t)n * (n + 1) / 2 || sum2 != sum)
        fail("own-worker allreduce: %lld %lld", (long long)sum, (long long)sum2);
    if (msr_comm_world_rank(own, msr_comm_rank(own)) != me || msr_comm_size(own) != n)
        fail("own-worker dup: rank %d of %d", msr_comm_rank(own), msr_comm_size(own));
    msr_comm_destroy(own);
}

/* Messages a member never receives, left in its engine when the engine
 * closes: rank 1 sends rank 0 a rendezvous-sized message and a small one
 * on a communicator with its own engine, which rank 0 destroys without
 * receiving them. Rank 0's close drops both, the rendezvous one answered
 * through the endpoint it came by (closing that endpoint first made UCX
 * follow a freed one), and rank 1's sends end without error. */
void cw_mode_unreceived(msr_comm_t *world)
{
    int me = msr_comm_rank(world);
    snprintf(g_case, sizeof g_case, "unreceived");
    msr_comm_t *own = NULL;
    OK(msr_comm_dup(world, MSR_COMM_OWN_WORKER, &own));
    size_t big = 1u << 20;
    unsigned char *out = xmalloc(big);
    memset(out, 7, big);
    msr_comm_req_t *q[2] = {NULL, NULL};
    int32_t mark = 0;
    if (me == 1) {
        OK(msr_comm_isend(own, out, big, MSR_DTYPE_U8, 0, 99, &q[0]));
        OK(msr_comm_isend(own, out, 8, MSR_DTYPE_U8, 0, 98, &q[1]));
        OK(msr_comm_send(own, &mark, 1, MSR_DTYPE_I32, 0, 97));
    } else if (me == 0) {
        /* sent after the two on the same connection, so they are in this
         * rank's queue once it is here (the barrier of one node's members
         * goes through their shared segment, past UCX) */
        OK(msr_comm_recv(own, &mark, 1, MSR_DTYPE_I32, 1, 97));
    }
    if (me == 1) {
        msr_comm_set_timeout(own, 20000); /* a send never taken fails, not hangs */
        /* done once rank 0's close has taken them, with or without its
         * word that it left first */
        for (int i = 0; i < 2; i++) {
            msr_status_t st = msr_comm_wait(q[i]);
            if (st != MSR_OK && st != MSR_ERR_PEER_LOST)
                fail("unreceived: send %d ended %s: %s", i, msr_status_name(st), msr_last_error());
        }
    }
    msr_comm_destroy(own);
    free(out);
    g_checks++;
}

/* comm_worker's modes of the receive from any source: anysrc (every member
 * hears from every member once, with tags, beside receives that name their
 * peer, on sub-groups, and its argument checks) and killanysrc (a member is
 * killed while the others' receives from any source wait). */
#include "comm_worker.h"

/* The value member (group rank) from sends to to with tag: its sender and
 * receiver in it, so that a message credited to the wrong sender shows. */
static int64_t msg_of(int from, int to, int tag)
{
    return (int64_t)from * 1000000 + (int64_t)to * 1000 + tag;
}

/* Every member sends one message with tag to every member (itself too);
 * every member then receives n from any source, blocking or not, and must
 * hear each sender once, the value naming the sender it reported. */
static void all_to_all_any(msr_comm_t *c, int tag, int nonblocking)
{
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    int64_t *out = xmalloc((size_t)n * sizeof *out), *in = xmalloc((size_t)n * sizeof *in);
    int *src = xmalloc((size_t)n * sizeof *src), *seen = xmalloc((size_t)n * sizeof *seen);
    msr_comm_req_t **rq = xmalloc((size_t)n * sizeof *rq), **sq = xmalloc((size_t)n * sizeof *sq);
    for (int j = 0; j < n; j++) {
        out[j] = msg_of(me, j, tag);
        src[j] = -1;
        seen[j] = 0;
        in[j] = -1;
        if (nonblocking)
            OK(msr_comm_irecv_any(c, &in[j], 1, MSR_DTYPE_I64, tag, &src[j], &rq[j]));
    }
    for (int j = 0; j < n; j++)
        OK(msr_comm_isend(c, &out[(me + j) % n], 1, MSR_DTYPE_I64, (me + j) % n, tag,
                          &sq[(me + j) % n]));
    if (nonblocking)
        OK(msr_comm_wait_all(rq, (size_t)n));
    else
        for (int j = 0; j < n; j++)
            OK(msr_comm_recv_any(c, &in[j], 1, MSR_DTYPE_I64, tag, &src[j]));
    OK(msr_comm_wait_all(sq, (size_t)n));
    for (int j = 0; j < n; j++) {
        if (src[j] < 0 || src[j] >= n)
            fail("receive %d: sender %d is not a member's rank", j, src[j]);
        if (seen[src[j]]++)
            fail("receive %d: sender %d heard twice", j, src[j]);
        if (in[j] != msg_of(src[j], me, tag))
            fail("receive %d: got %lld, credited to rank %d", j, (long long)in[j], src[j]);
        g_checks++;
    }
    free(out);
    free(in);
    free(src);
    free(seen);
    free(rq);
    free(sq);
}

/* A receive that names the left neighbour, posted before the ones from any
 * source with the same tag, gets the left's message; those from any source
 * get every other member's, once; one with another tag, posted among them,
 * gets the right neighbour's. */
static void sourced_beside_any(msr_comm_t *c)
{
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    int left = (me + n - 1) % n, right = (me + 1) % n, tag = 4, other = MSR_COMM_TAG_MAX;
    int nq = n + 1; /* the named, n - 2 from any source, the other tag */
    int64_t *in = xmalloc((size_t)nq * sizeof *in), *out = xmalloc((size_t)n * sizeof *out);
    int *src = xmalloc((size_t)nq * sizeof *src), *seen = xmalloc((size_t)n * sizeof *seen);
    msr_comm_req_t **q = xmalloc((size_t)(nq + n) * sizeof *q);
    int k = 0;
    OK(msr_comm_irecv(c, &in[k++], 1, MSR_DTYPE_I64, left, tag, &q[0]));
    for (int j = 0; j < n - 2; j++) {
        src[k] = -1;
        OK(msr_comm_irecv_any(c, &in[k], 1, MSR_DTYPE_I64, tag, &src[k], &q[k]));
        k++;
        if (j == 0) { /* the other tag among them, from any source */
            src[k] = -1;
            OK(msr_comm_irecv_any(c, &in[k], 1, MSR_DTYPE_I64, other, &src[k], &q[k]));
            k++;
        }
    }
    if (n == 2) {
        src[k] = -1;
        OK(msr_comm_irecv_any(c, &in[k], 1, MSR_DTYPE_I64, other, &src[k], &q[k]));
        k++;
    }
    int sent = 0;
    for (int j = 0; j < n; j++) {
        if (j == me)
            continue;
        out[j] = msg_of(me, j, tag);
        OK(msr_comm_isend(c, &out[j], 1, MSR_DTYPE_I64, j, tag, &q[k + sent++]));
    }
    int64_t to_left = msg_of(me, left, other);
    OK(msr_comm_isend(c, &to_left, 1, MSR_DTYPE_I64, left, other, &q[k + sent++]));
    OK(msr_comm_wait_all(q, (size_t)(k + sent)));
    if (in[0] != msg_of(left, me, tag))
        fail("the named receive got %lld", (long long)in[0]);
    for (int j = 0; j < n; j++)
        seen[j] = j == left || j == me;
    for (int i = 1; i < k; i++) {
        int want_tag = (n == 2 || i == 2) ? other : tag;
        if (src[i] < 0 || src[i] >= n)
            fail("receive %d: sender %d is not a member's rank", i, src[i]);
        if (in[i] != msg_of(src[i], me, want_tag))
            fail("receive %d (tag %d): got %lld from rank %d", i, want_tag, (long long)in[i],
                 src[i]);
        if (want_tag == other && src[i] != right)
            fail("the other tag's receive: from rank %d, not %d", src[i], right);
        if (want_tag == tag && seen[src[i]]++)
            fail("receive %d: sender %d heard twice", i, src[i]);
        g_checks++;
    }
    free(in);
    free(out);
    free(src);
    free(seen);
    free(q);
}

/* Receives from any source of a length other than the message's (longer
 * by a little, into none, shorter, longer past the eager sizes), blocking
 * and not: each fails naming the real sender (the left neighbour, the only
 * one sending) and both sizes, leaves *src_p unwritten and the
 * communicator usable. */
static void any_lengths(msr_comm_t *c, int *src_p)
{
    static const size_t sent[] = {32, 8, 8, (1u << 20) + 8};
    static const size_t room[] = {16, 0, 16, 1u << 20};
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    size_t most = (1u << 20) + 8;
    unsigned char *out = xmalloc(most), *in = xmalloc(most);
    memset(out, me + 1, most);
    for (int nb = 0; nb < 2; nb++)
        for (size_t k = 0; k < sizeof sent / sizeof sent[0]; k++) {
            snprintf(g_case, sizeof g_case, "anysrc: %zu bytes into %zu, %s", sent[k], room[k],
                     nb ? "irecv_any" : "recv_any");
            int before = *src_p;
            msr_comm_req_t *s = NULL, *q = NULL;
            OK(msr_comm_isend(c, out, sent[k], MSR_DTYPE_U8, (me + 1) % n, 12, &s));
            msr_status_t st;
            if (nb) {
                OK(msr_comm_irecv_any(c, in, room[k], MSR_DTYPE_U8, 12, src_p, &q));
                st = msr_comm_wait(q);
            } else {
                st = msr_comm_recv_any(c, in, room[k], MSR_DTYPE_U8, 12, src_p);
            }
            cw_expect_cut(st, (me + n - 1) % n, sent[k], room[k]);
            if (*src_p != before)
                fail("a failed receive wrote the sender (%d)", *src_p);
            OK(msr_comm_wait(s));
            OK(msr_comm_barrier(c));
        }
    free(out);
    free(in);
}

/* Bad arguments change nothing; receives of the wrong length fail, leave
 * the sender unwritten and the communicator usable. */
static void any_errors(msr_comm_t *c)
{
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    int64_t x[2] = {0};
    int src = -7;
    msr_comm_req_t *q = NULL;
    if (msr_comm_recv_any(c, x, 1, MSR_DTYPE_I64, -1, &src) != MSR_ERR_INVALID_ARG ||
        msr_comm_recv_any(c, x, 1, MSR_DTYPE_I64, MSR_COMM_TAG_MAX + 1, &src) !=
            MSR_ERR_INVALID_ARG ||
        msr_comm_recv_any(c, NULL, 1, MSR_DTYPE_I64, 0, &src) != MSR_ERR_INVALID_ARG ||
        msr_comm_recv_any(c, x, 1, (msr_dtype_t)42, 0, &src) != MSR_ERR_INVALID_ARG ||
        msr_comm_irecv_any(c, x, 1, MSR_DTYPE_I64, 0, &src, NULL) != MSR_ERR_INVALID_ARG ||
        msr_comm_irecv_any(c, x, 1, MSR_DTYPE_I64, -1, &src, &q) != MSR_ERR_INVALID_ARG ||
        msr_comm_recv(c, x, 1, MSR_DTYPE_I64, -1, 0) != MSR_ERR_INVALID_ARG)
        fail("a bad argument was not refused");
    if (src != -7 || q != NULL || msr_comm_status(c) != MSR_OK)
        fail("a refused call changed something");
    any_lengths(c, &src);
    /* no place for the sender: the message still arrives */
    msr_comm_req_t *s = NULL;
    int64_t one = msg_of(me, (me + 1) % n, 13), got = -1;
    OK(msr_comm_isend(c, &one, 1, MSR_DTYPE_I64, (me + 1) % n, 13, &s));
    OK(msr_comm_recv_any(c, &got, 1, MSR_DTYPE_I64, 13, NULL));
    OK(msr_comm_wait(s));
    if (got != msg_of((me + n - 1) % n, me, 13))
        fail("without src_p: got %lld", (long long)got);
}

void cw_mode_anysrc(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    for (int nb = 0; nb < 2; nb++) {
        snprintf(g_case, sizeof g_case, "anysrc: all to all, %s", nb ? "irecv_any" : "recv_any");
        all_to_all_any(world, nb ? MSR_COMM_TAG_MAX : 0, nb);
        all_to_all_any(world, 77, nb);
    }
    snprintf(g_case, sizeof g_case, "anysrc: beside named receives");
    if (n >= 2)
        sourced_beside_any(world);
    snprintf(g_case, sizeof g_case, "anysrc: errors");
    any_errors(world);
    if (msr_comm_status(world) != MSR_OK)
        fail("the world broke");
    /* sub-groups, ranked backwards: the sender is a rank of the group */
    snprintf(g_case, sizeof g_case, "anysrc: sub-group");
    msr_comm_t *sub = NULL;
    OK(msr_comm_split(world, me % 2, -me, &sub));
    int sn = msr_comm_size(sub), sme = msr_comm_rank(sub);
    int want = 0; /* members of my parity above me come first */
    for (int r = me + 2; r < n; r += 2)
        want++;
    if (sme != want)
        fail("split: rank %d in the group, %d expected", sme, want);
    all_to_all_any(sub, 5, 1);
    /* the world's message with the same tag is not the group's */
    int64_t wv = msg_of(me, me, 5), sv = msg_of(sme, sme, 5), win = -1, sin = -1;
    int wsrc = -1, ssrc = -1;
    msr_comm_req_t *q[4];
    OK(msr_comm_irecv_any(sub, &sin, 1, MSR_DTYPE_I64, 5, &ssrc, &q[0]));
    OK(msr_comm_irecv_any(world, &win, 1, MSR_DTYPE_I64, 5, &wsrc, &q[1]));
    OK(msr_comm_isend(world, &wv, 1, MSR_DTYPE_I64, me, 5, &q[2]));
    OK(msr_comm_isend(sub, &sv, 1, MSR_DTYPE_I64, sme, 5, &q[3]));
    OK(msr_comm_wait_all(q, 4));
    if (win != wv || wsrc != me || sin != sv || ssrc != sme)
        fail("world %lld from %d, group %lld from %d", (long long)win, wsrc, (long long)sin, ssrc);
    (void)sn;
    msr_comm_destroy(sub);
    OK(msr_comm_barrier(world));
}

/* ---- a member killed while the receives from any source wait ---- */

static void *kill_later(void *arg)
{
    (void)arg;
    usleep(300 * 1000); /* the others' blocking receives have begun by then, most likely */
    raise(SIGKILL);
    return NULL;
}

/* Every member posts a receive from any source that no one answers; after a
 * barrier the last member kills itself. Every survivor's receive must fail
 * with MSR_ERR_PEER_LOST well within the deadline (odd ranks wait in
 * msr_comm_recv_any, even ranks in msr_comm_wait of msr_comm_irecv_any). */
void cw_mode_killanysrc(msr_ctx_t *ctx, msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    signal(SIGTERM, SIG_IGN); /* msrun's SIGTERM: the survivors must notice on their own */
    int64_t timeout_ms = 20000;
    msr_comm_set_timeout(world, timeout_ms);
    int64_t x = -1;
    int src = -7;
    msr_comm_req_t *q = NULL;
    snprintf(g_case, sizeof g_case, "killanysrc: post");
    if (me % 2 == 0 || me == n - 1)
        OK(msr_comm_irecv_any(world, &x, 1, MSR_DTYPE_I64, 6, &src, &q));
    OK(msr_comm_barrier(world));
    if (me == n - 1) {
        pthread_t th;
        pthread_create(&th, NULL, kill_later, NULL);
        for (;;)
            pause();
    }
    snprintf(g_case, sizeof g_case, "killanysrc: wait");
    double start = now_ms();
    msr_status_t st =
        q ? msr_comm_wait(q) : msr_comm_recv_any(world, &x, 1, MSR_DTYPE_I64, 6, &src);
    double took = now_ms() - start;
    char why[256];
    snprintf(why, sizeof why, "%s", msr_last_error());
    if (st != MSR_ERR_PEER_LOST)
        fail("%s failed with %s (%s)", q ? "irecv_any" : "recv_any", msr_status_name(st), why);
    if (src != -7 || x != -1)
        fail("the failed receive wrote its outputs");
    /* the death is noticed long before the deadline; 2 s past it for a
     * loaded machine would still be a hang's sign */
    if (took > (double)timeout_ms + 2000)
        fail("noticed after %.0f ms", took);
    msr_comm_destroy(world);
    printf("rank %d survived: %s after %.0f ms (%s): %s\n", me, msr_status_name(st), took,
           q ? "irecv_any" : "recv_any", why);
    fflush(stdout);
    msr_finalize(ctx);
    exit(0);
}

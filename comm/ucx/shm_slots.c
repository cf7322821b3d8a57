/* The shared-memory slots (shm.c sets up the segment and tells how they
 * alternate): small allreduce, reduce-scatter, allgather and broadcast,
 * and the barrier, in one publish and one wait, no message. */
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "comm/reduce.h"
#include "comm/ucx/shm_impl.h"
#include "comm/ucx/ucx_impl.h"

static inline void spin_pause(void)
{
#if defined(__x86_64__)
    _mm_pause();
#endif
}

/* What a member puts in its slot for the operation: the input (a
 * reduce-scatter's whole vector), nothing for a broadcast's non-root (and
 * the barrier). */
static size_t slot_bytes(const ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (a->coll == MSR_COLL_REDUCE_SCATTER)
        return r->bytes * (size_t)r->n;
    if (a->coll == MSR_COLL_BROADCAST && r->me != a->root)
        return 0;
    return r->bytes;
}

/* Whether every member published k (from sl->first_unseen on): its
 * input for k is in its slot, and it finished every operation before k.
 * This member's own word is not read: wherever it asks (its turn for k,
 * the wait for k), it published k - 1, or k, already. */
static int all_reached(struct ucx_shm *s, ucx_req_t *r, uint64_t k)
{
    if (r->n == 2) { /* the peer's word alone */
        s->peer_seq = atomic_load_explicit(&s->ctl[1 - r->me].c[C_SEQ], memory_order_acquire);
        return s->peer_seq >= k;
    }
    for (int j = r->slots.first_unseen; j < r->n; j++) {
        if (j != r->me && atomic_load_explicit(&s->ctl[j].c[C_SEQ], memory_order_acquire) < k) {
            r->slots.first_unseen = j;
            return 0;
        }
    }
    r->slots.first_unseen = 0;
    return 1;
}

_Static_assert(sizeof(((ucx_shm_slots_t *)0)->peer) >= SHM_INLINE, "a peer's inline vector fits");

/* Whether the peer of a two-member group published k, its vector of
 * 1 to SHM_INLINE bytes in its counters' line then copied at once: the
 * peer, past k as soon as it saw this member's k, writes its next
 * operation into that same line, and a read of the vector later (in the
 * fold) would find the line gone back to the peer and wait for a second
 * transfer. The copy is the vector of k: the peer rewrites its half of the
 * line (k & 1) only at k + 2, after this member published k + 1. */
static int peer_seen(struct ucx_shm *s, ucx_req_t *r, uint64_t k, size_t in)
{
    int p = 1 - r->me;
    s->peer_seq = atomic_load_explicit(&s->ctl[p].c[C_SEQ], memory_order_acquire);
    if (s->peer_seq < k)
        return 0;
    memcpy(r->slots.peer, data_of(s, p, k, in), in);
    return 1;
}

/* Whether slots_seen copied member j's input for the operation (peer_seen);
 * the same answer on both of its sides. */
static int copied(const ucx_req_t *r, int j, size_t in)
{
    return r->n == 2 && j != r->me && in > 0 && in <= SHM_INLINE;
}

/* Member j's input for operation k: the copy peer_seen took, or the
 * member's own place. In a group of two, this member's own inline vector
 * from its input: the same bytes, which it copied into its counters'
 * line, but the peer's reads of its word take that line away, and a read
 * of the vector there waited for it to come back (the fold of two reads
 * each element before it writes it, so an input in place is whole). */
static const char *input_of(const struct ucx_shm *s, const ucx_req_t *r, int j, uint64_t k,
                            size_t in)
{
    if (j == r->me && r->n == 2 && in > 0 && in <= SHM_INLINE)
        return r->pub.args.sendbuf;
    return copied(r, j, in) ? r->slots.peer : data_of(s, j, k, in);
}

/* Whether this operation's input (in bytes) travels lined: the same
 * answer on every member. Broadcasts keep their ring. */
static int lined(const struct ucx_shm *s, const ucx_req_t *r, size_t in)
{
    return in > SHM_INLINE && in <= s->lined_max && r->pub.args.coll != MSR_COLL_BROADCAST;
}

/* Whether this operation is a broadcast through the lined broadcasts'
 * rings (shm_impl.h): a vector of 1 to SHM_BCAST_WIDTH lines' data. */
static int bcast_lined(const struct ucx_shm *s, const ucx_req_t *r)
{
    return r->pub.args.coll == MSR_COLL_BROADCAST && r->bytes > 0 &&
           r->bytes <= SHM_BCAST_WIDTH * SHM_LINE_DATA && s->bcast != NULL;
}

/* Whether broadcast k's lines show k: every word loaded before any is
 * tested, so that a reader's transfers of the lines overlap. */
static int bcast_seen(const struct ucx_shm *s, uint64_t k, size_t bytes)
{
    uint64_t w[SHM_BCAST_WIDTH] = {0};
    size_t lines = shm_lines(bytes);
    for (size_t i = 0; i < lines; i++)
        w[i] = atomic_load_explicit(line_word(bcast_line(s, k, i), 0), memory_order_acquire);
    int seen = 1;
    for (size_t i = 0; i < lines; i++)
        seen &= w[i] == k;
    return seen;
}

/* Whether this member publishes only its peer's block of its input: a
 * reduce-scatter of a two-member group, whose peer reads nothing else of
 * it (a vector of up to 112 bytes then takes one line, where the whole of
 * it took two). */
static int lined_half(const ucx_req_t *r)
{
    return r->n == 2 && r->pub.args.coll == MSR_COLL_REDUCE_SCATTER;
}

/* The part of each member's lined vector this member reads: a
 * reduce-scatter's block of it, the whole of it otherwise (in a group of
 * two, where the peer published only that block, the length alone:
 * pair_lines_seen reads from its start). */
static void lined_range(const ucx_req_t *r, size_t in, size_t *off_p, size_t *len_p)
{
    int rs = r->pub.args.coll == MSR_COLL_REDUCE_SCATTER;
    *off_p = rs ? (size_t)r->me * r->bytes : 0;
    *len_p = rs ? r->bytes : in;
}

/* Writes len bytes into lined lines for operation k, line i at area + i
 * x stride (a member's lined area: LINE; the lined broadcasts' rings: a
 * ring's length): each line's data, then its word (release: a reader that
 * sees k sees the data). */
static void lined_put(char *area, size_t stride, const char *src, size_t len, uint64_t k)
{
    for (size_t off = 0; off < len; off += SHM_LINE_DATA, area += stride) {
        memcpy(area, src + off, len - off < SHM_LINE_DATA ? len - off : SHM_LINE_DATA);
        atomic_store_explicit(line_word(area, 0), k, memory_order_release);
    }
}

/* Copies bytes [off, off + len) of a lined vector (line i at area + i x
 * stride) out (every line they lie on seen at the operation's number). */
static void lined_get(char *dst, const char *area, size_t stride, size_t off, size_t len)
{
    area += off / SHM_LINE_DATA * stride;
    for (size_t o = off % SHM_LINE_DATA; len; o = 0, area += stride) {
        size_t c = SHM_LINE_DATA - o < len ? SHM_LINE_DATA - o : len;
        memcpy(dst, area + o, c);
        dst += c;
        len -= c;
    }
}

/* Whether every other member's lines holding bytes [off, off + len) of
 * its vector show k (from first_unseen and first_line on): each line is
 * read, later, only after its own word was. */
static int lines_seen(const struct ucx_shm *s, ucx_req_t *r, uint64_t k, size_t off, size_t len)
{
    ucx_shm_slots_t *sl = &r->slots;
    size_t first = off / SHM_LINE_DATA, end = (off + len - 1) / SHM_LINE_DATA + 1;
    for (int j = sl->first_unseen; j < r->n; j++) {
        if (j == r->me)
            continue;
        char *area = lined_of(s, j, k);
        for (size_t i = first + sl->first_line; i < end; i++) {
            if (atomic_load_explicit(line_word(area, i), memory_order_acquire) != k) {
                sl->first_unseen = j;
                sl->first_line = i - first;
                return 0;
            }
        }
        sl->first_line = 0;
    }
    sl->first_unseen = 0;
    return 1;
}

/* Where a two-member group's reader copies its peer's lined vector: an
 * allgather's straight to its block of the output, else pair_vec. */
static char *pair_dst(struct ucx_shm *s, const ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (a->coll == MSR_COLL_ALLGATHER)
        return (char *)a->recvbuf + (size_t)(1 - r->me) * r->bytes;
    return s->pair_vec;
}

/* lines_seen for a group of two, whose range starts at 0: each line of
 * the peer's vector is copied out (pair_dst) the moment its word shows
 * k, so the copy of the first lines overlaps the transfers of the later
 * ones. The peer rewrites those lines at k + 2, after this member
 * published k + 1. */
static int pair_lines_seen(struct ucx_shm *s, ucx_req_t *r, uint64_t k, size_t len)
{
    ucx_shm_slots_t *sl = &r->slots;
    char *area = lined_of(s, 1 - r->me, k);
    char *dst = pair_dst(s, r);
    size_t lines = shm_lines(len);
    for (size_t i = sl->first_line; i < lines; i++) {
        const char *line = area + i * LINE;
        if (atomic_load_explicit(line_word(area, i), memory_order_acquire) != k) {
            sl->first_line = i;
            return 0;
        }
        size_t o = i * SHM_LINE_DATA;
        if (len - o >= SHM_LINE_DATA)
            memcpy(dst + o, line, SHM_LINE_DATA);
        else
            memcpy(dst + o, line, len - o);
    }
    sl->first_line = 0;
    return 1;
}

/* Whether every member whose slot this operation reads published k: a
 * broadcast reads the root's only (a lined one its line, whose word is k
 * once the root wrote it); a lined vector's lines carry k themselves. */
static int slots_seen(struct ucx_shm *s, ucx_req_t *r, uint64_t k)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (a->coll == MSR_COLL_BROADCAST && bcast_lined(s, r))
        return r->me == a->root || bcast_seen(s, k, r->bytes);
    if (a->coll == MSR_COLL_BROADCAST)
        return r->me == a->root ||
               atomic_load_explicit(&s->ctl[a->root].c[C_SEQ], memory_order_acquire) >= k;
    size_t in = slot_bytes(r), off, len;
    if (copied(r, 1 - r->me, in))
        return peer_seen(s, r, k, in);
    if (!lined(s, r, in))
        return all_reached(s, r, k);
    lined_range(r, in, &off, &len);
    if (r->n == 2)
        return pair_lines_seen(s, r, k, len);
    return lines_seen(s, r, k, off, len);
}

/* Whether every other member published an operation past last (a
 * broadcast root's check that its ring entry's readers are done). The
 * least number they showed is kept (s->ring_seen): the root reads their
 * words again only when its entry lies past what they showed last, not
 * on every broadcast, so that the readers' lines stay with the readers
 * while the root runs ahead. */
static int ring_readers_past(struct ucx_shm *s, const ucx_req_t *r, uint64_t last)
{
    uint64_t least = UINT64_MAX;
    for (int j = 0; j < r->n; j++) {
        if (j == r->me)
            continue;
        uint64_t v = atomic_load_explicit(&s->ctl[j].c[C_SEQ], memory_order_acquire);
        if (v < least)
            least = v;
    }
    s->ring_seen = least;
    return least > last;
}

/* Places broadcast k in the ring of its parity (once, at its turn: every
 * member places the same operations in the same order) and returns the
 * operation every member must have finished before the root may write
 * there (0: none). The ring's entries are whole cache lines of the
 * members' slots k & 1, as many as fit the vector, in turn: broadcast k
 * overwrites what the broadcast of the same stride 2 x entries before it
 * wrote, or what one of another stride or an operation whose members wrote
 * their own slots (data_op) wrote before those. */
static uint64_t ring_place(struct ucx_shm *s, uint64_t k, size_t bytes)
{
    const int p = (int)(k & 1);
    size_t stride = bytes <= LINE ? LINE : (bytes + LINE - 1) / LINE * LINE;
    uint64_t per_slot = s->slot >= stride ? s->slot / stride : 1; /* 1: no slots, no bytes */
    uint64_t entries = per_slot * (uint64_t)s->n;
    if (s->ring_booked != k) {
        if (stride != s->ring_stride[p]) {
            s->ring_other[p] = s->ring_last[p];
            s->ring_stride[p] = stride;
        }
        s->ring_last[p] = k;
        uint64_t i = (k >> 1) % entries;
        s->ring_cur = slot_of(s, (int)(i / per_slot), k) + (size_t)(i % per_slot) * stride;
        s->ring_booked = k;
    }
    uint64_t last = k > 2 * entries ? k - 2 * entries : 0;
    if (s->ring_other[p] > last)
        last = s->ring_other[p];
    if (s->data_op[p] > last)
        last = s->data_op[p];
    return last;
}

/* Whether operation k may publish here: the one before finished here, and
 * no member still reads what k overwrites. Members write their slot k & 1,
 * last written by k - 2 at the latest (or by a broadcast of that parity
 * before it): every member must have finished k - 2, i.e. published k - 1.
 * A broadcast's root writes its ring entry (ring_place), or its line of
 * the lined broadcasts' ring: only the operation that wrote it last must
 * be finished, so the root runs up to the ring's length ahead of its
 * slowest reader; readers write nothing and go at once. */
static int slots_turn(struct ucx_shm *s, ucx_req_t *r, uint64_t k)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (r->uc->shm_done != k - 1)
        return 0;
    /* a two-member group's operation of at most SHM_INLINE bytes (its
     * vector in the counters' line) or none (a barrier): where this member
     * saw the peer publish k - 1 already, the peer's line is not read
     * again (a read of it now, while the peer writes its next operation
     * there, takes the line from the peer and back for nothing) */
    if (a->coll != MSR_COLL_BROADCAST && r->n == 2 && slot_bytes(r) <= SHM_INLINE &&
        s->peer_seq >= k - 1)
        return 1;
    if (a->coll != MSR_COLL_BROADCAST)
        return all_reached(s, r, k - 1);
    uint64_t last;
    if (bcast_lined(s, r)) /* its lines' last writer: SHM_BCAST_LINES before, or earlier */
        last = k > SHM_BCAST_LINES ? k - SHM_BCAST_LINES : 0;
    else
        last = ring_place(s, k, r->bytes); /* where the readers read, too */
    return r->me != a->root || last == 0 || last < s->ring_seen || ring_readers_past(s, r, last);
}

/* dst = x op y over count elements: a few floats inline, the rest through
 * msr_reduce. */
static inline void fold_n(const msr_coll_args_t *a, void *dst, const void *x, const void *y,
                          size_t count)
{
    if (!msr_reduce_few(a->op, a->dtype, dst, x, y, count))
        msr_reduce(a->op, a->dtype, dst, x, y, count);
}

/* Folds bytes [off, off + len) of every member's lined vector into
 * recvbuf in rank order, line by line and in place: each line's piece of
 * rank 0 op rank 1's, then op each next one's (msr_reduce's operands and
 * order for every element, so its bits). A line holds whole elements
 * (SHM_LINE_DATA is a multiple of 8, off of the element size). Groups of
 * more than two: a group of two folds its copy (lined_finish). */
static void lined_fold(const struct ucx_shm *s, const ucx_req_t *r, uint64_t k, size_t off,
                       size_t len)
{
    const msr_coll_args_t *a = &r->pub.args;
    char *dst = a->recvbuf;
    size_t at = off / SHM_LINE_DATA * LINE + off % SHM_LINE_DATA;
    while (len) {
        size_t c = SHM_LINE_DATA - at % LINE;
        if (c > len)
            c = len;
        size_t count = c / r->es;
        fold_n(a, dst, lined_of(s, 0, k) + at, lined_of(s, 1, k) + at, count);
        for (int j = 2; j < r->n; j++)
            fold_n(a, dst, dst, lined_of(s, j, k) + at, count);
        dst += c;
        len -= c;
        at = (at / LINE + 1) * LINE;
    }
}

/* Every lined vector is there: copy each straight to its place
 * (allgather) or fold them in rank order (allreduce; reduce-scatter this
 * member's block of them), read in place. In a group of two the peer's
 * is copied out already (pair_lines_seen), and this member's own bytes
 * come from its input, where it copied them from (its lines went to the
 * peer's reads: a read there would wait for them to come back). */
static void lined_finish(const struct ucx_shm *s, const ucx_req_t *r, uint64_t k, size_t in)
{
    const msr_coll_args_t *a = &r->pub.args;
    size_t off, len;
    if (a->coll == MSR_COLL_ALLGATHER) {
        for (int j = 0; j < r->n; j++)
            if (j != r->me && r->n > 2)
                lined_get((char *)a->recvbuf + (size_t)j * r->bytes, lined_of(s, j, k), LINE, 0,
                          in);
            else if (j == r->me && !a->in_place)
                memcpy((char *)a->recvbuf + (size_t)j * r->bytes, a->sendbuf, in);
        return;
    }
    if (r->n == 2) { /* a reduce-scatter's own block of its input, the peer's half */
        const char *mine =
            (const char *)a->sendbuf + (lined_half(r) ? (size_t)r->me * r->bytes : 0);
        fold_n(a, a->recvbuf, r->me == 0 ? mine : s->pair_vec, r->me == 0 ? s->pair_vec : mine,
               a->count);
    } else {
        lined_range(r, in, &off, &len);
        lined_fold(s, r, k, off, len);
    }
    if (a->op == MSR_OP_AVG)
        msr_reduce_finish(a->op, a->dtype, a->recvbuf, a->count, r->n);
}

/* Every slot is there: fold them in rank order (allreduce; reduce-scatter
 * this member's block of them) or copy them out (allgather, broadcast). */
static void slots_finish(const struct ucx_shm *s, const ucx_req_t *r, uint64_t k)
{
    const msr_coll_args_t *a = &r->pub.args;
    size_t in = slot_bytes(r), off = 0;
    if (r->bytes == 0)
        return;
    if (lined(s, r, in)) {
        lined_finish(s, r, k, in);
        return;
    }
    switch (a->coll) {
    case MSR_COLL_REDUCE_SCATTER:
        off = (size_t)r->me * r->bytes;
        /* fall through */
    case MSR_COLL_ALLREDUCE:
        fold_n(a, a->recvbuf, input_of(s, r, 0, k, in) + off, input_of(s, r, 1, k, in) + off,
               a->count);
        for (int j = 2; j < r->n; j++)
            fold_n(a, a->recvbuf, a->recvbuf, data_of(s, j, k, in) + off, a->count);
        if (a->op == MSR_OP_AVG)
            msr_reduce_finish(a->op, a->dtype, a->recvbuf, a->count, r->n);
        return;
    case MSR_COLL_ALLGATHER:
        for (int j = 0; j < r->n; j++)
            if (j != r->me || !a->in_place)
                memcpy((char *)a->recvbuf + (size_t)j * r->bytes, input_of(s, r, j, k, in), in);
        return;
    case MSR_COLL_BROADCAST:
        if (r->me != a->root && bcast_lined(s, r))
            lined_get(a->recvbuf, bcast_line(s, k, 0), BCAST_STRIDE, 0, r->bytes);
        else if (r->me != a->root)
            memcpy(a->recvbuf, s->ring_cur, r->bytes);
        return;
    default:
        return;
    }
}

/* The slots: wait for our turn (the operation before finished here and
 * every member published it), publish our input, then wait for the
 * members whose slots we read and fold or copy them. */
msr_status_t ucx_shm_step(ucx_req_t *r)
{
    struct ucx_shm *s = r->uc->shm;
    const msr_coll_args_t *a = &r->pub.args;
    ucx_shm_slots_t *sl = &r->slots;
    const uint64_t k = sl->seq;
    if (!sl->published) {
        if (!slots_turn(s, r, k))
            return MSR_IN_PROGRESS;
        size_t in = slot_bytes(r);
        if (in && bcast_lined(s, r)) {
            lined_put(bcast_line(s, k, 0), BCAST_STRIDE, a->sendbuf, in, k);
        } else if (in && a->coll == MSR_COLL_BROADCAST) {
            memcpy(s->ring_cur, a->sendbuf, in);
        } else if (lined(s, r, in) && lined_half(r)) {
            lined_put(lined_of(s, r->me, k), LINE,
                      (const char *)a->sendbuf + (size_t)(1 - r->me) * r->bytes, r->bytes, k);
        } else if (lined(s, r, in)) {
            lined_put(lined_of(s, r->me, k), LINE, a->sendbuf, in, k);
        } else if (in) {
            memcpy(data_of(s, r->me, k, in), a->sendbuf, in);
            s->data_op[k & 1] = k;
        }
        atomic_store_explicit(&s->ctl[r->me].c[C_SEQ], k, memory_order_release);
        sl->published = 1;
    }
    /* where members have CPUs of their own, the word is usually a cache
     * line transfer away: poll it here a while rather than through a
     * round of the engine's loop (a lock, UCX's progress, the yields) */
    int polls = r->uc->shm_own_cpus ? r->uc->tune.shm_spin : 0;
    for (int i = 0; !slots_seen(s, r, k); i++) {
        if (i >= polls)
            return MSR_IN_PROGRESS;
        spin_pause();
    }
    slots_finish(s, r, k);
    r->uc->shm_done = k;
    return MSR_OK;
}

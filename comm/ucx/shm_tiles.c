/* The tiled path through a group's shared-memory segment (shm.c makes it):
 * large allreduce, reduce-scatter, allgather, broadcast and reduce, tile by
 * tile, pipelined, with non-temporal copies where they pay (chosen by
 * measurement), every element folded by one member in rank order. */
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#define SHM_HAVE_NT 1
#else
#define SHM_HAVE_NT 0
#endif

#include "base/time.h"
#include "comm/reduce.h"
#include "comm/ucx/shm_impl.h"
#include "comm/ucx/ucx_impl.h"

/* ---- the tiled path ----
 * Large allreduce, broadcast and reduce, and reduce-scatter and allgather,
 * of a group on one node go through the segment tile by tile, pipelined: a
 * member copies a tile of its input into its stage slot (stage), folds its
 * part of the tile from every member's stage in rank order (reduce: into
 * the result slot for an allreduce, straight into its output for a
 * reduce-scatter), and copies the whole tile out (copy). Every byte crosses
 * between processes once, by memcpy, where the UCX ring pulls it through
 * process_vm_readv twice; and every element is folded by one member, in
 * rank order, so every rank gets the same bits, whatever the tile size.
 *
 * Slots are reused every depth tiles. Tile g goes into slot g % depth; a
 * member stages tile g once every member's red has passed g - depth (nobody
 * reads the slot's last tile any more), and reduces into result slot
 * g % depth once every member's out has passed g - depth. Tiles are counted
 * over the communicator's life, so consecutive operations pipeline without
 * a barrier; the sequence word orders them with the small path. */

/* memcpy with stores that bypass the cache, for data another core reads
 * next: when the two cores do not share a cache (on this development VM the
 * hypervisor moves the two vCPUs between core complexes every few seconds),
 * the reader then fetches it from memory instead of snooping it out of the
 * writer's cache, which is 3-4x slower there; where they share one, reading
 * from memory costs a little. Large operations only (MSR_COMM_SHM_NT_MIN).
 * nt_fence() orders these stores before the counter that publishes them. */
static void copy_nt(void *dst, const void *src, size_t len)
{
#if SHM_HAVE_NT
    char *d = dst;
    const char *p = src;
    size_t head = (size_t)(-(uintptr_t)d & 15);
    if (head > len)
        head = len;
    memcpy(d, p, head);
    d += head, p += head, len -= head;
    for (; len >= 64; len -= 64, d += 64, p += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)p);
        __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(p + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, p, len);
#else
    memcpy(dst, src, len);
#endif
}

static void nt_fence(void)
{
#if SHM_HAVE_NT
    _mm_sfence();
#endif
}

/* the stage and result copies of r: bypassing the cache or not */
static void copy_for_peers(const ucx_req_t *r, void *dst, const void *src, size_t len)
{
    if (r->tiles.bypass)
        copy_nt(dst, src, len);
    else
        memcpy(dst, src, len);
}

static uint64_t min_of(const struct ucx_shm *s, int c)
{
    uint64_t m = UINT64_MAX;
    for (int j = 0; j < s->n; j++) {
        uint64_t v = atomic_load_explicit(&s->ctl[j].c[c], memory_order_acquire);
        if (v < m)
            m = v;
    }
    return m;
}

static void publish(const struct ucx_shm *s, int me, int c, uint64_t v)
{
    atomic_store_explicit(&s->ctl[me].c[c], v, memory_order_release);
}

static char *stage_of(const struct ucx_shm *s, int rank, uint64_t g)
{
    return s->stage + ((size_t)rank * s->depth + g % s->depth) * s->tile;
}

static char *result_of(const struct ucx_shm *s, uint64_t g)
{
    return s->result + (size_t)(g % s->depth) * s->tile;
}

/* dst = src[0] op src[1] op ... op src[n-1], folded in rank order. */
static void fold(const msr_coll_args_t *a, void *dst, const void *const *src, int n, uint64_t count)
{
    msr_reduce(a->op, a->dtype, dst, src[0], src[1], count);
    for (int j = 2; j < n; j++)
        msr_reduce(a->op, a->dtype, dst, dst, src[j], count);
    msr_reduce_finish(a->op, a->dtype, dst, count, n);
}

/* Elements per tile: a whole tile for an allreduce or an allgather, a
 * line-aligned n-th of one per member for a reduce-scatter. */
static uint64_t tile_elems(const struct ucx_shm *s, msr_coll_t coll, size_t es)
{
    if (coll == MSR_COLL_REDUCE_SCATTER)
        return (s->tile / (size_t)s->n / LINE * LINE) / es;
    return s->tile / es;
}

/* The whole vector (for a reduce-scatter or an allgather, every rank's
 * block). */
static size_t total_bytes(const ucx_req_t *r)
{
    msr_coll_t c = r->pub.args.coll;
    return c == MSR_COLL_REDUCE_SCATTER || c == MSR_COLL_ALLGATHER ? r->bytes * (size_t)r->n
                                                                   : r->bytes;
}

/* May this operation's stores bypass the cache (MSR_COMM_SHM_NT and
 * MSR_COMM_SHM_NT_MIN)? */
static int may_bypass(const ucx_req_t *r)
{
    /* not a reduce: the members but the root have no output to fold into */
    return r->uc->tune.shm_nt != 0 && r->pub.args.coll != MSR_COLL_REDUCE &&
           total_bytes(r) >= r->uc->tune.shm_nt_min;
}

static int size_class(size_t bytes)
{
    int c = 0;
    while (bytes >>= 1)
        c++;
    return c;
}

/* The estimate for a size class and store kind: the best of its last
 * samples (a rank's time for an operation only grows with the delays of
 * sharing a core); 0 while any is missing. */
static uint64_t estimate(const struct ucx_shm *s, int c, int kind)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < NT_SAMPLES; i++) {
        uint64_t v = s->ns_per_kib[c][kind][i];
        if (v == 0)
            return 0;
        if (v < best)
            best = v;
    }
    return best;
}

/* Whether this operation bypasses the cache. Which is faster depends on
 * whether the members' cores share a cache, which can change while a job
 * runs (a VM's vCPUs move between core complexes): with "auto", each size
 * class first measures both kinds of store, then runs with the one whose
 * recent best was faster, and every sixteenth operation with the other, to
 * notice a change (one good sample of it is enough to switch back). The
 * choice is this rank's own (the bits of the result do not depend on it);
 * the probes fall on the same operations on every member, since all count
 * the same operations. */
static int choose_bypass(ucx_req_t *r)
{
    if (!may_bypass(r))
        return 0;
    if (r->uc->tune.shm_nt == 1)
        return 1;
    struct ucx_shm *s = r->uc->shm;
    int c = size_class(total_bytes(r));
    uint32_t k = s->ops[c]++;
    uint64_t plain = estimate(s, c, 0), past = estimate(s, c, 1);
    if (plain == 0 || past == 0)
        return k & 1; /* measuring both, alternately */
    int best = past < plain;
    return k % 16 == 15 ? !best : best;
}

/* An operation that chose by measurement ended: its time per KiB replaces
 * the oldest sample of its class and store kind. */
static void account(ucx_req_t *r)
{
    if (r->uc->tune.shm_nt != 2 || !may_bypass(r))
        return;
    struct ucx_shm *s = r->uc->shm;
    int c = size_class(total_bytes(r)), kind = r->tiles.bypass ? 1 : 0;
    uint64_t ns = msr_now_ns() - r->tiles.start_ns;
    s->ns_per_kib[c][kind][s->next[c][kind]] = ns * 1024 / (total_bytes(r) | 1) + 1;
    s->next[c][kind] = (s->next[c][kind] + 1) % NT_SAMPLES;
}

size_t ucx_shm_tiled_scratch(const ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (a->coll != MSR_COLL_ALLREDUCE || !a->in_place || a->count == 0 || !may_bypass(r))
        return 0;
    /* an allreduce in place bypassing the cache folds its part there */
    uint64_t te = tile_elems(r->uc->shm, a->coll, r->es);
    return (size_t)((te + (uint64_t)r->n - 1) / (uint64_t)r->n) * r->es;
}

void ucx_shm_tiled_init(ucx_req_t *r)
{
    const struct ucx_shm *s = r->uc->shm;
    const msr_coll_args_t *a = &r->pub.args;
    uint64_t te = tile_elems(s, a->coll, r->es);
    uint64_t nt = (a->count + te - 1) / te;
    ucx_shm_tiles_t *t = &r->tiles;
    t->bypass = choose_bypass(r);
    t->first_tile = r->uc->shm_tiles;
    t->ntiles = nt;
    t->tile_elems = te;
    t->ready = UINT64_MAX;
    r->uc->shm_tiles += nt;
}

/* Elements in tile i of count elements cut into tiles of te. */
static uint64_t tile_len(uint64_t count, uint64_t te, uint64_t i)
{
    return count - i * te < te ? count - i * te : te;
}

/* May tile g take its slot? Yes once every member's counter c has passed
 * the slot's previous tile, g - depth. */
static int slot_free(const struct ucx_shm *s, uint64_t g, int c)
{
    return g < s->depth || min_of(s, c) > g - s->depth;
}

/* Tile i of an allreduce, or of a reduce (only the root copies the
 * result out): elements [i * te, i * te + len). */
static int ar_move(ucx_req_t *r, const struct ucx_shm *s, uint64_t *done)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_shm_tiles_t *t = &r->tiles;
    const uint64_t base = t->first_tile, nt = t->ntiles, te = t->tile_elems;
    uint64_t ci = t->staged, cr = t->reduced, co = t->copied;
    size_t es = r->es;
    int me = r->me, n = r->n;
    if (cr < ci && min_of(s, C_IN) > base + cr && slot_free(s, base + cr, C_OUT)) {
        uint64_t g = base + cr, first = cr * te, len = tile_len(a->count, te, cr);
        uint64_t off, cnt;
        ucx_part(len, (uint64_t)n, (uint64_t)me, &off, &cnt);
        if (cnt) {
            const void *src[n];
            for (int j = 0; j < n; j++)
                src[j] = j == me ? (const char *)a->sendbuf + (first + off) * es
                                 : stage_of(s, j, g) + off * es;
            if (t->bypass) {
                /* our part goes straight into our output too (in place,
                 * through scratch: the fold still reads our input there),
                 * so that the copy leaves it out */
                char *mine = (char *)a->recvbuf + (first + off) * es;
                if (a->in_place) {
                    fold(a, r->scratch, src, n, cnt);
                    memcpy(mine, r->scratch, cnt * es);
                } else {
                    fold(a, mine, src, n, cnt);
                }
                copy_nt(result_of(s, g) + off * es, mine, cnt * es);
                nt_fence();
            } else {
                fold(a, result_of(s, g) + off * es, src, n, cnt);
            }
        }
        publish(s, me, C_RED, g + 1);
        t->reduced = cr + 1;
        if (a->coll == MSR_COLL_REDUCE && me != a->root) { /* the root copies */
            publish(s, me, C_OUT, g + 1);
            t->copied = cr + 1;
            *done = cr + 1 == nt;
        }
        return 1;
    }
    if (co < cr && min_of(s, C_RED) > base + co) {
        uint64_t g = base + co, first = co * te, len = tile_len(a->count, te, co);
        char *out = (char *)a->recvbuf + first * es;
        const char *res = result_of(s, g);
        if (t->bypass) { /* our part is there already */
            uint64_t off, cnt;
            ucx_part(len, (uint64_t)n, (uint64_t)me, &off, &cnt);
            memcpy(out, res, off * es);
            memcpy(out + (off + cnt) * es, res + (off + cnt) * es, (len - off - cnt) * es);
        } else {
            memcpy(out, res, len * es);
        }
        publish(s, me, C_OUT, g + 1);
        t->copied = co + 1;
        *done = co + 1 == nt;
        return 1;
    }
    if (ci < nt && slot_free(s, base + ci, C_RED)) {
        uint64_t g = base + ci, first = ci * te, len = tile_len(a->count, te, ci);
        uint64_t off, cnt;
        ucx_part(len, (uint64_t)n, (uint64_t)me, &off, &cnt);
        /* everything but our own part, which we fold from sendbuf */
        const char *in = (const char *)a->sendbuf + first * es;
        char *st = stage_of(s, me, g);
        copy_for_peers(r, st, in, off * es);
        copy_for_peers(r, st + (off + cnt) * es, in + (off + cnt) * es, (len - off - cnt) * es);
        nt_fence();
        publish(s, me, C_IN, g + 1);
        t->staged = ci + 1;
        return 1;
    }
    return 0;
}

/* Block q of a reduce-scatter's input or an allgather's output: q * count
 * elements in, count long; or with tiles.parts (hier.c) balanced parts of
 * that many elements, count the largest. */
static void block_of(const ucx_req_t *r, int q, uint64_t *off, uint64_t *len)
{
    if (r->tiles.parts) {
        ucx_part(r->tiles.parts, (uint64_t)r->n, (uint64_t)q, off, len);
    } else {
        *off = (uint64_t)q * r->pub.args.count;
        *len = r->pub.args.count;
    }
}

/* Elements of tile i (from element first) in a block of blen: fewer in its
 * last tile, none past its end. */
static uint64_t tile_part(uint64_t blen, uint64_t te, uint64_t first)
{
    return blen <= first ? 0 : blen - first < te ? blen - first : te;
}

/* Tile i of a reduce-scatter: elements [i * te, i * te + len) of every
 * block; member j's slice q of a stage slot holds its block q's. */
static int rs_move(ucx_req_t *r, const struct ucx_shm *s, uint64_t *done)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_shm_tiles_t *t = &r->tiles;
    const uint64_t base = t->first_tile, nt = t->ntiles, te = t->tile_elems;
    uint64_t ci = t->staged, cr = t->reduced;
    size_t es = r->es, slice = te * es;
    int me = r->me, n = r->n;
    /* in place, our block is also the output: fold it from the stage */
    int own_staged = a->in_place;
    if (cr < ci && min_of(s, C_IN) > base + cr) {
        uint64_t g = base + cr, first = cr * te, off, blen;
        block_of(r, me, &off, &blen);
        uint64_t len = tile_part(blen, te, first);
        const void *src[n];
        for (int j = 0; j < n; j++)
            src[j] = j == me && !own_staged ? (const char *)a->sendbuf + (off + first) * es
                                            : stage_of(s, j, g) + (size_t)me * slice;
        if (len)
            fold(a, (char *)a->recvbuf + first * es, src, n, len);
        publish(s, me, C_RED, g + 1);
        publish(s, me, C_OUT, g + 1);
        t->reduced = cr + 1;
        *done = cr + 1 == nt;
        return 1;
    }
    if (ci < nt && slot_free(s, base + ci, C_RED)) {
        uint64_t g = base + ci, first = ci * te, off, blen;
        char *st = stage_of(s, me, g);
        for (int q = 0; q < n; q++) {
            block_of(r, q, &off, &blen);
            if (q != me || own_staged)
                copy_for_peers(r, st + (size_t)q * slice,
                               (const char *)a->sendbuf + (off + first) * es,
                               tile_part(blen, te, first) * es);
        }
        nt_fence();
        publish(s, me, C_IN, g + 1);
        t->staged = ci + 1;
        return 1;
    }
    return 0;
}

/* Tile i of an allgather: elements [i * te, i * te + len) of every block. */
static int ag_move(ucx_req_t *r, const struct ucx_shm *s, uint64_t *done)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_shm_tiles_t *t = &r->tiles;
    const uint64_t base = t->first_tile, nt = t->ntiles, te = t->tile_elems;
    uint64_t ci = t->staged, co = t->copied, off, blen;
    size_t es = r->es;
    int me = r->me, n = r->n;
    if (co < ci && min_of(s, C_IN) > base + co) {
        uint64_t g = base + co, first = co * te;
        for (int j = 0; j < n; j++) {
            block_of(r, j, &off, &blen);
            char *dst = (char *)a->recvbuf + (off + first) * es;
            uint64_t len = tile_part(blen, te, first);
            if (j != me)
                memcpy(dst, stage_of(s, j, g), len * es);
            else if (!a->in_place)
                memcpy(dst, (const char *)a->sendbuf + first * es, len * es);
        }
        publish(s, me, C_RED, g + 1);
        publish(s, me, C_OUT, g + 1);
        t->copied = co + 1;
        *done = co + 1 == nt;
        return 1;
    }
    if (ci >= nt)
        return 0;
    uint64_t first = ci * te;
    block_of(r, me, &off, &blen);
    if ((first + te < blen ? first + te : blen) <= t->ready && slot_free(s, base + ci, C_OUT)) {
        uint64_t g = base + ci;
        copy_for_peers(r, stage_of(s, me, g), (const char *)a->sendbuf + first * es,
                       tile_part(blen, te, first) * es);
        nt_fence();
        publish(s, me, C_IN, g + 1);
        t->staged = ci + 1;
        return 1;
    }
    return 0;
}

/* Tile i of a broadcast: the root stages it, the others copy it out of the
 * root's stage slot. */
static int bc_move(ucx_req_t *r, const struct ucx_shm *s, uint64_t *done)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_shm_tiles_t *t = &r->tiles;
    const uint64_t base = t->first_tile, nt = t->ntiles, te = t->tile_elems;
    uint64_t ci = t->staged, co = t->copied;
    size_t es = r->es;
    int me = r->me, root = a->root;
    char *buf = a->recvbuf;
    if (me == root) {
        if (ci >= nt || !slot_free(s, base + ci, C_OUT))
            return 0;
        uint64_t g = base + ci, len = tile_len(a->count, te, ci);
        copy_for_peers(r, stage_of(s, me, g), buf + ci * te * es, len * es);
        nt_fence();
        publish(s, me, C_IN, g + 1);
        publish(s, me, C_RED, g + 1);
        publish(s, me, C_OUT, g + 1);
        t->staged = ci + 1;
        *done = ci + 1 == nt;
        return 1;
    }
    uint64_t g = base + co;
    if (co >= nt || atomic_load_explicit(&s->ctl[root].c[C_IN], memory_order_acquire) <= g)
        return 0;
    memcpy(buf + co * te * es, stage_of(s, root, g), tile_len(a->count, te, co) * es);
    publish(s, me, C_RED, g + 1);
    publish(s, me, C_OUT, g + 1);
    t->copied = co + 1;
    *done = co + 1 == nt;
    return 1;
}

/* Waits for the operations before to finish here, then does every move it
 * can and lets the others catch up. */
msr_status_t ucx_shm_tiled_step(ucx_req_t *r)
{
    const struct ucx_shm *s = r->uc->shm;
    ucx_shm_tiles_t *t = &r->tiles;
    const uint64_t k = t->seq;
    if (!t->started) {
        if (r->uc->shm_done != k - 1)
            return MSR_IN_PROGRESS; /* an earlier operation is still running here */
        t->started = 1;
        t->start_ns = msr_now_ns();
    }
    uint64_t done = t->ntiles == 0;
    int moved = 0;
    while (!done) {
        int m;
        switch (r->pub.args.coll) {
        case MSR_COLL_ALLREDUCE:
        case MSR_COLL_REDUCE:
            m = ar_move(r, s, &done);
            break;
        case MSR_COLL_BROADCAST:
            m = bc_move(r, s, &done);
            break;
        case MSR_COLL_REDUCE_SCATTER:
            m = rs_move(r, s, &done);
            break;
        default:
            m = ag_move(r, s, &done);
            break;
        }
        if (!m)
            break;
        moved = 1;
    }
    if (moved)
        r->uc->engine->shm_moved++;
    if (!done)
        return MSR_IN_PROGRESS;
    publish(s, r->me, C_SEQ, k);
    r->uc->shm_done = k;
    account(r);
    return MSR_OK;
}

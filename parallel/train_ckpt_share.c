/* ZeRO 0 replicas share their reads of a checkpoint (see
 * train_ckpt_impl.h and docs/checkpoint.md, "Replicas share their
 * reads"). Each replica of a dp group at ZeRO 0 holds every element of
 * its part of the model: read alone, each would read all of it, dp times
 * the bytes off the disk. Here the replicas split the pieces between them:
 * in a resume of their own layout each reads its own file (the share it
 * saved), in any other each a run of the pieces they need, about 1/dp of
 * their bytes; each broadcasts what it reads to the others as it lands,
 * and the reader's read ahead keeps the disk busy while a segment goes
 * out. The rounds are in a fixed order every rank computes alike from the
 * replicas' lists: in round s, replica 0's segment s, then replica 1's,
 * and so on. A piece that lands in place in the buffers (msr_dp_load_dest)
 * is read and broadcast straight there; any other (a tensor-parallel
 * slice, a piece the map cuts) is read whole into a piece's buffer,
 * broadcast into each rank's, and applied by each rank. A replica whose
 * read or check fails goes on taking part in every broadcast without
 * reading (its segments carry whatever its buffers hold), so that no rank
 * waits for it; msr_dp_load_end then agrees that the load failed. */
#include "parallel/train.h"
#include "parallel/train_impl.h"
#include "parallel/train_ckpt_impl.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "model/err_call.h"
#include "msrun/device.h"
#include "parallel/dp_impl.h"

/* The floats of one broadcast: 1 MiB, a quarter of the reader's read
 * ahead, so that the disk has the next read in flight while it goes out. */
#define SHARE_SEG ((uint64_t)1 << 18)

/* The most bytes of piece buffers (one per replica) a rank allocates to
 * share; past it the replicas read alone. */
#define SHARE_BUF_MAX ((size_t)256 << 20)

/* In another layout the group shares when, reading alone, its ranks
 * would read at least this many times the bytes it needs: broadcasting
 * what only one rank needs costs more than that rank reading it. */
#define SHARE_OVERLAP 1.25

/* Pieces that land in place and hold at most this many floats (their
 * parameters, m and v together) go out packed with the ones after them,
 * up to SHARE_SEG floats a broadcast: a tensor-parallel rank's file holds
 * thousands of row slices of a few KiB, and a broadcast of a few KiB costs
 * in calls about what one of 1 MiB does. */
#define SHARE_SMALL (SHARE_SEG / 16)

/* A piece in a replica's rounds: its range (offset and crc known to its
 * reader), the payload and saved rank it comes from (p NULL: another
 * replica's own file, known by its table only), and whether it lands in
 * place. */
typedef struct item {
    msr_tckpt_range_t r;
    const payload_t *p;
    int file;
    int in_place;
} item_t;

/* Where a replica's rounds stand: its item j, the array a of it (in
 * place: the parameters, m, v, their order in the file; else the piece's
 * buffer as one array), the element o of that. */
typedef struct cursor {
    int64_t j;
    int a;
    uint64_t o;
    float *dst[3]; /* where item j goes on this rank */
    size_t local;  /* in place: its first local element */
    uint32_t crc;  /* this rank's own item: its CRC so far */
} cursor_t;

typedef struct share {
    msr_trainer_t *tr;
    const msr_ckpt_map_t *map;
    const source_t *src;
    msr_comm_t *comm;
    int size, me;
    int64_t *count;  /* each replica's items */
    item_t **items;  /* each replica's */
    float **buf;     /* each replica's piece buffer (NULL: all its items in place) */
    float **pack;    /* each replica's buffer of small items (NULL: none small) */
    item_t *block;   /* the items' memory */
    payload_t *head; /* resharded: every saved rank's header (one is p0's) */
    int files;
} share_t;

/* A collective's failure st, with what failed in front of its text. */
static msr_status_t comm_failed(const char *what, msr_status_t st)
{
    return msr_err_call(st, "train: %s while the replicas shared a checkpoint's reads", what);
}

/* The group agrees on flag (its minimum over the ranks). */
static msr_status_t agree(const share_t *s, int32_t *flag)
{
    msr_status_t st = msr_comm_allreduce(s->comm, MSR_IN_PLACE, flag, 1, MSR_DTYPE_I32, MSR_OP_MIN);
    return st == MSR_OK ? MSR_OK : comm_failed("agreeing on sharing", st);
}

/* Whether elements [lo, lo + n) land in place on this rank. */
static int in_place(const share_t *s, uint64_t lo, uint64_t n)
{
    float *dst[3];
    size_t local;
    return n > 0 && msr_train_ckpt_dest(s->tr, s->map, lo, n, dst, &local);
}

/* Whether item it goes out packed with its neighbours. */
static int small(const item_t *it)
{
    return it->in_place && 3 * it->r.n <= SHARE_SMALL;
}

/* Each replica's piece buffer, as large as its largest item not in place,
 * and its buffer of small items (in all, at most SHARE_BUF_MAX bytes). 0
 * when that cannot be had. */
static int buffers(share_t *s)
{
    size_t all = 0;
    for (int q = 0; q < s->size; q++) {
        size_t floats = 0;
        int any_small = 0;
        for (int64_t j = 0; j < s->count[q]; j++) {
            const item_t *it = &s->items[q][j];
            floats = it->in_place ? floats : MSR_MAX(floats, 3 * (size_t)it->r.n);
            any_small = any_small || small(it);
        }
        all += (floats + (any_small ? SHARE_SEG : 0)) * sizeof(float);
        if (all > SHARE_BUF_MAX)
            return 0;
        if (floats > 0 && (s->buf[q] = msr_malloc(floats * sizeof(float))) == NULL)
            return 0;
        if (any_small && (s->pack[q] = msr_malloc(SHARE_SEG * sizeof(float))) == NULL)
            return 0;
    }
    return 1;
}

/* Own layout: every replica's items (its own file's pieces), from their
 * tables exchanged, and whether each lands in place here (*ok_p, agreed). */
static msr_status_t own_items(share_t *s, const payload_t *p0, int rank, int32_t *ok_p)
{
    int64_t total = 0, mine = (int64_t)p0->n, *tab = NULL;
    *ok_p = 0;
    msr_status_t st = msr_comm_allgather(s->comm, &mine, s->count, 1, MSR_DTYPE_I64);
    if (st != MSR_OK)
        return comm_failed("exchanging the piece counts", st);
    for (int q = 0; q < s->size; q++)
        total += s->count[q];
    size_t at = (size_t)MSR_MAX(total, 1);
    int32_t ok = (s->block = msr_calloc(at, sizeof *s->block)) != NULL &&
                 (tab = msr_malloc(2 * at * sizeof *tab)) != NULL;
    if ((st = agree(s, &ok)) != MSR_OK || !ok) {
        msr_free(tab);
        return st;
    }
    at = 0;
    for (int q = 0; q < s->size; at += (size_t)s->count[q], q++)
        s->items[q] = s->block + at;
    for (uint32_t j = 0; j < p0->n; j++)
        s->items[s->me][j] = (item_t){p0->ranges[j], p0, rank, 1};
    for (int q = 0; q < s->size && st == MSR_OK; q++) {
        item_t *it = s->items[q];
        for (int64_t j = 0; j < s->count[q] && q == s->me; j++)
            tab[2 * j] = (int64_t)it[j].r.lo, tab[2 * j + 1] = (int64_t)it[j].r.n;
        if (s->count[q] > 0)
            st = msr_comm_broadcast(s->comm, tab, 2 * (uint64_t)s->count[q], MSR_DTYPE_I64, q);
        for (int64_t j = 0; j < s->count[q] && q != s->me && st == MSR_OK; j++) {
            it[j] = (item_t){{(uint64_t)tab[2 * j], (uint64_t)tab[2 * j + 1]}, NULL, -1, 1};
            ok = ok && tab[2 * j] >= 0 && tab[2 * j + 1] > 0 && in_place(s, it[j].r.lo, it[j].r.n);
        }
    }
    msr_free(tab);
    if (st != MSR_OK)
        return comm_failed("exchanging the piece tables", st);
    ok = ok && buffers(s);
    if ((st = agree(s, &ok)) == MSR_OK)
        *ok_p = ok;
    return st;
}

/* Another layout: every saved rank's header (first's is p0) and, for
 * each of their pieces in the files' order, two flags: this rank needs it,
 * and it does not land here in place (*flags_p, 2 *total_p of them, the
 * caller's); *alone_p: the bytes this rank would read alone; *sum_p: a
 * sum of the pieces' places, alike on every rank. 0 when this
 * rank cannot (a header it cannot read or that belongs to another
 * checkpoint: the load as before says which). */
static int other_heads(share_t *s, const payload_t *p0, int world, int first, int32_t **flags_p,
                       int64_t *total_p, int64_t *alone_p, uint64_t *sum_p)
{
    int64_t total = 0, i = 0;
    uint8_t *need = NULL;
    if ((s->head = msr_calloc((size_t)world, sizeof *s->head)) == NULL)
        return 0;
    s->files = world;
    for (int f = 0; f < world; f++) {
        if (f != first &&
            (msr_train_ckpt_read_head(s->src, f, &s->head[f]) != MSR_OK ||
             !msr_train_ckpt_same(p0, &s->head[f], world) || s->head[f].h.rank != (uint32_t)f))
            return 0;
        total += (int64_t)(f == first ? p0 : &s->head[f])->n;
    }
    int32_t *flags = msr_malloc(2 * (size_t)MSR_MAX(total, 1) * sizeof *flags);
    need = msr_malloc(2 * (size_t)msr_tckpt_chunks(MSR_TCKPT_PIECE_MAX));
    for (int f = 0; f < world && flags != NULL && need != NULL; f++) {
        const payload_t *p = f == first ? p0 : &s->head[f];
        for (uint32_t k = 0; k < p->n; k++, i++) {
            const msr_tckpt_range_t *r = &p->ranges[k];
            uint64_t bytes = msr_train_ckpt_read_bytes(s->tr, s->map, p, r, need);
            flags[2 * i] = bytes > 0;
            flags[2 * i + 1] = !(bytes > 0 && in_place(s, r->lo, r->n));
            *alone_p += (int64_t)bytes;
            *sum_p += r->lo * 31 + r->n + r->offset + (uint64_t)f;
        }
    }
    msr_free(need);
    *flags_p = flags;
    *total_p = total;
    return flags != NULL && i == total;
}

/* The group's lists: the pieces any rank needs (flags, the group's
 * maxima of other_heads'), in the files' order, in place where they land
 * in place on every rank, split into runs of about equal bytes, one a
 * rank; *bytes_p: theirs. 0 when out of memory. */
static int other_items(share_t *s, const payload_t *p0, int world, int first, const int32_t *flags,
                       uint64_t *bytes_p)
{
    size_t total = 0, bytes = 0, i = 0;
    for (int f = 0; f < world; f++) {
        const payload_t *p = f == first ? p0 : &s->head[f];
        for (uint32_t k = 0; k < p->n; k++, i++)
            if (flags[2 * i])
                total++, bytes += 12 * (size_t)p->ranges[k].n;
    }
    if ((s->block = msr_calloc(MSR_MAX(total, (size_t)1), sizeof *s->block)) == NULL)
        return 0;
    size_t at = 0, done = 0;
    int q = 0;
    s->items[0] = s->block;
    i = 0;
    for (int f = 0; f < world; f++) {
        const payload_t *p = f == first ? p0 : &s->head[f];
        for (uint32_t k = 0; k < p->n; k++, i++) {
            const msr_tckpt_range_t *r = &p->ranges[k];
            if (!flags[2 * i])
                continue;
            /* the next rank's run starts at its share of the bytes */
            while (q + 1 < s->size && done * (size_t)s->size >= bytes * (size_t)(q + 1))
                s->items[++q] = s->block + at;
            s->block[at++] = (item_t){*r, p, f, !flags[2 * i + 1]};
            s->count[q]++;
            done += 12 * (size_t)r->n;
        }
    }
    while (q + 1 < s->size)
        s->items[++q] = s->block + at;
    *bytes_p = bytes;
    return 1;
}

/* Replica q's run of small items from c->j, at most SHARE_SEG floats, in
 * one broadcast: its reader reads each into its pack buffer (a read each,
 * the reads one after the other in its file, each checked by the piece's
 * CRC), and every rank copies each into place from its own. */
static msr_status_t batch(share_t *s, int q, cursor_t *c, msr_status_t *read_st)
{
    const item_t *it = s->items[q];
    float *pack = s->pack[q];
    int64_t e = c->j;
    uint64_t floats = 0, at = 0;
    int mine = q == s->me;
    while (e < s->count[q] && small(&it[e]) && floats + 3 * it[e].r.n <= SHARE_SEG)
        floats += 3 * it[e++].r.n;
    for (int64_t k = c->j; k < e && mine && *read_st == MSR_OK; at += 3 * it[k++].r.n) {
        uint32_t crc = msr_tckpt_piece_crc_start(&it[k].p->h, &it[k].r);
        msr_status_t st = msr_train_ckpt_read_crc(s->src, it[k].file, it[k].r.offset, pack + at,
                                                  3 * it[k].r.n * sizeof(float), &crc);
        *read_st =
            st != MSR_OK
                ? msr_train_ckpt_piece_failed(s->tr, s->map, it[k].p, it[k].file, &it[k].r, st)
                : msr_train_ckpt_piece_check(s->tr, s->map, it[k].p, it[k].file, &it[k].r, crc);
    }
    msr_status_t st = msr_comm_broadcast(s->comm, pack, floats, MSR_DTYPE_F32, q);
    if (st != MSR_OK)
        return comm_failed("broadcasting pieces", st);
    at = 0;
    for (int64_t k = c->j; k < e && (!mine || *read_st == MSR_OK); at += 3 * it[k++].r.n) {
        float *dst[3];
        size_t local, n = (size_t)it[k].r.n;
        msr_train_ckpt_dest(s->tr, s->map, it[k].r.lo, n, dst, &local);
        for (int a = 0; a < 3; a++)
            memcpy(dst[a], pack + at + (size_t)a * n, n * sizeof(float));
        msr_dp_load_mark(s->tr->dp, local, n);
    }
    c->j = e;
    return MSR_OK;
}

/* The last segment of item it of replica q went out: its reader checks its
 * CRC, and every rank marks it found (in place) or applies its buffer. */
static void item_end(share_t *s, int q, const item_t *it, cursor_t *c, msr_status_t *read_st)
{
    int mine = q == s->me;
    if (mine && *read_st == MSR_OK)
        *read_st = msr_train_ckpt_piece_check(s->tr, s->map, it->p, it->file, &it->r, c->crc);
    if (mine && *read_st != MSR_OK)
        return; /* what it sent does not count: msr_dp_load_end refuses the load */
    if (it->in_place) {
        msr_dp_load_mark(s->tr->dp, c->local, it->r.n);
        return;
    }
    msr_tckpt_range_t r = it->r;
    r.params = s->buf[q];
    r.m = r.params + r.n;
    r.v = r.m + r.n;
    payload_t one = {NULL, it->p->h, &r, 1, 0};
    msr_train_ckpt_apply(s->tr, s->map, &one, NULL);
}

/* Replica q's next segment of its rounds: this rank reads it first when q
 * is this rank (unless *read_st already failed: then it sends what its
 * buffer holds), then every rank takes part in its broadcast. */
static msr_status_t segment(share_t *s, int q, cursor_t *c, msr_status_t *read_st)
{
    const item_t *it = &s->items[q][c->j];
    uint64_t n = it->r.n, alen = it->in_place ? n : 3 * n;
    int mine = q == s->me;
    if (c->a == 0 && c->o == 0 && small(it))
        return batch(s, q, c, read_st);
    if (c->a == 0 && c->o == 0) { /* a new item (found in place, or buffered, by the lists) */
        if (it->in_place)
            msr_train_ckpt_dest(s->tr, s->map, it->r.lo, n, c->dst, &c->local);
        else
            c->dst[0] = s->buf[q];
        if (mine && *read_st == MSR_OK)
            c->crc = msr_tckpt_piece_crc_start(&it->p->h, &it->r);
    }
    /* a segment of one array in place, or of the piece's three in its buffer */
    uint64_t len = MSR_MIN(SHARE_SEG, alen - c->o);
    float *at = c->dst[c->a] + c->o;
    if (mine && *read_st == MSR_OK) {
        uint64_t off = it->r.offset + ((uint64_t)c->a * n + c->o) * sizeof(float);
        msr_status_t st =
            msr_train_ckpt_read_crc(s->src, it->file, off, at, len * sizeof(float), &c->crc);
        if (st != MSR_OK)
            *read_st = msr_train_ckpt_piece_failed(s->tr, s->map, it->p, it->file, &it->r, st);
    }
    if (!mine) /* its pages mapped at once, not a fault every 4 KiB as they arrive */
        (void)msr_prefault(at, len * sizeof(float));
    msr_status_t st = msr_comm_broadcast(s->comm, at, len, MSR_DTYPE_F32, q);
    if (st != MSR_OK)
        return comm_failed("broadcasting a piece", st);
    if ((c->o += len) < alen)
        return MSR_OK;
    c->o = 0;
    if (++c->a < (it->in_place ? 3 : 1))
        return MSR_OK;
    item_end(s, q, it, c, read_st);
    c->a = 0;
    c->j++;
    return MSR_OK;
}

/* The rounds: every replica's segments in turn until all are sent. */
static msr_status_t rounds(share_t *s, cursor_t *cur, msr_status_t *read_st)
{
    for (int any = 1; any;) {
        any = 0;
        for (int q = 0; q < s->size; q++) {
            if (cur[q].j >= s->count[q])
                continue;
            any = 1;
            msr_status_t st = segment(s, q, &cur[q], read_st);
            if (st != MSR_OK)
                return st;
        }
    }
    return MSR_OK;
}

/* Whether this rank can share: a checkpoint read in parts into host
 * memory, with no experts (their shards go through a buffer); in its own
 * layout, its own pieces all land in place. */
static int can_share(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p0,
                     const source_t *src, int own_layout)
{
    if (src->read == NULL || !p0->partial || tr->model->moe != NULL ||
        !msr_device_is_host(tr->dp->dev) || p0->n > INT32_MAX)
        return 0;
    for (uint32_t j = 0; j < p0->n && own_layout; j++) {
        float *dst[3];
        size_t local;
        if (p0->ranges[j].n == 0 ||
            !msr_train_ckpt_dest(tr, map, p0->ranges[j].lo, p0->ranges[j].n, dst, &local))
            return 0;
    }
    return 1;
}

/* Another layout: the lists, made alike on every rank from every rank's
 * flags, and whether to share (*ok_p, agreed): every rank has its
 * headers, the same pieces and its buffers, and reading alone the group
 * would read at least SHARE_OVERLAP times the bytes it needs. */
static msr_status_t resharded_items(share_t *s, const payload_t *p0, int world, int first,
                                    int32_t *ok_p)
{
    int32_t *flags = NULL;
    int64_t total = 0, alone = 0;
    uint64_t bytes = 0, sum = 0;
    int ok = other_heads(s, p0, world, first, &flags, &total, &alone, &sum);
    int64_t v[5] = {ok, total, -total, (int64_t)(sum >> 1), -(int64_t)(sum >> 1)};
    *ok_p = 0;
    msr_status_t st = msr_comm_allreduce(s->comm, MSR_IN_PLACE, v, 5, MSR_DTYPE_I64, MSR_OP_MIN);
    int same = v[0] == 1 && v[1] == -v[2] && v[3] == -v[4] && total > 0;
    if (st == MSR_OK && same) /* every rank's flags, then the bytes read alone */
        st = msr_comm_allreduce(s->comm, MSR_IN_PLACE, flags, 2 * (uint64_t)total, MSR_DTYPE_I32,
                                MSR_OP_MAX);
    if (st == MSR_OK && same)
        st = msr_comm_allreduce(s->comm, MSR_IN_PLACE, &alone, 1, MSR_DTYPE_I64, MSR_OP_SUM);
    if (st == MSR_OK && same) {
        int32_t can = other_items(s, p0, world, first, flags, &bytes) && buffers(s) &&
                      (double)alone >= SHARE_OVERLAP * (double)bytes;
        st = agree(s, &can);
        *ok_p = st == MSR_OK && can;
    }
    msr_free(flags);
    return st == MSR_OK ? MSR_OK : comm_failed("agreeing on the pieces", st);
}

/* The buffers the load fills, mapped at once (a page fault every 4 KiB as
 * the copies land costs more than the copies): the parameters (ZeRO 3:
 * the shard's; not with their blocks offloaded, which fill a block at a
 * time and would only take the blocks' pages) and the moments. For a tp
 * group, whose pieces are applied from a buffer in slices, each slice's
 * own few pages. */
static void prefault_state(msr_trainer_t *tr)
{
    msr_dp_t *dp = tr->dp;
    if (msr_dp_params_store(dp) == NULL && dp->cfg.zero >= 3)
        (void)msr_prefault(dp->pshard, dp->shard_count * sizeof(float));
    else if (msr_dp_params_store(dp) == NULL)
        (void)msr_prefault(tr->model->params, tr->model->num_params * sizeof(float));
    if (dp->opt->m != NULL) {
        (void)msr_prefault(dp->opt->m, dp->opt->count * sizeof(float));
        (void)msr_prefault(dp->opt->v, dp->opt->count * sizeof(float));
    }
}

static void share_free(share_t *s)
{
    for (int q = 0; s->buf != NULL && q < s->size; q++)
        msr_free(s->buf[q]);
    for (int q = 0; s->pack != NULL && q < s->size; q++)
        msr_free(s->pack[q]);
    msr_free(s->pack);
    for (int f = 0; s->head != NULL && f < s->files; f++)
        payload_free(&s->head[f]);
    msr_free(s->head);
    msr_free(s->block);
    msr_free(s->buf);
    msr_free(s->items);
    msr_free(s->count);
}

msr_status_t msr_train_ckpt_share(msr_trainer_t *tr, const msr_ckpt_map_t *map, msr_comm_t *group,
                                  int world, int first, const source_t *src, const payload_t *p0,
                                  int own_layout, int ok, int *shared_p)
{
    share_t s = {tr, map, src, group, msr_comm_size(group), msr_comm_rank(group)};
    size_t n = (size_t)MSR_MAX(s.size, 1);
    cursor_t *cur = msr_calloc(n, sizeof *cur);
    s.count = msr_calloc(n, sizeof *s.count);
    s.items = msr_calloc(n, sizeof *s.items);
    s.buf = msr_calloc(n, sizeof *s.buf);
    s.pack = msr_calloc(n, sizeof *s.pack);
    int replicas = group == tr->dp->comm; /* else a tp group: another layout only */
    int32_t can = ok && cur != NULL && s.count != NULL && s.items != NULL && s.buf != NULL &&
                  s.pack != NULL && (replicas || !own_layout) &&
                  can_share(tr, map, p0, src, own_layout),
            shared = 0;
    msr_status_t read_st = MSR_OK;
    *shared_p = 0;
    msr_status_t st = agree(&s, &can); /* every rank takes part, whatever it lacks */
    if (st == MSR_OK && can) {
        st = own_layout ? own_items(&s, p0, first, &shared)
                        : resharded_items(&s, p0, world, first, &shared);
    }
    if (st == MSR_OK && shared) {
        *shared_p = 1;
        if (!replicas) /* replicas map each segment as it arrives */
            prefault_state(tr);
        st = rounds(&s, cur, &read_st);
        if (st == MSR_OK && read_st == MSR_OK && own_layout)
            read_st = msr_train_ckpt_chunks_check(tr, map, p0, src, first);
    }
    share_free(&s);
    msr_free(cur);
    return st != MSR_OK ? st : read_st;
}

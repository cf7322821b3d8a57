/* The trainer's checkpoint payload (see ckpt.h). */
#include "parallel/ckpt.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "base/status.h"
#include "model/err_call.h"
#include "model/gpt.h"
#include "msrun/checkpoint.h"

#define PAYLOAD_MAGIC    "MSRTRN04"
#define PAYLOAD_VERSION  4u
/* version 3: the same without the chunk table after the pieces */
#define PAYLOAD_MAGIC_V3 "MSRTRN03"
/* version 2: the same bytes; its ranges were the saving rank's own flat
 * elements, which are the whole model's only without model parallel (the
 * only version 2 checkpoints a run's settings text lets through, ckpt.h) */
#define PAYLOAD_MAGIC_V2 "MSRTRN02"
#define MAX_WORLD        (1u << 20)

_Static_assert(MSR_TCKPT_PIECE_MAX % MSR_TCKPT_CRC_CHUNK == 0,
               "a range's pieces have whole chunks but its last");

/* The header's fixed part: magic, version, length, 5 x u64, 5 x u32,
 * and from version 3 the layout, 6 x u32. */
#define FIXED_LEN_V2 (8 + 2 * 4 + 5 * 8 + 5 * 4)
#define FIXED_LEN    (FIXED_LEN_V2 + 6 * 4)

static size_t fixed_len(uint32_t version)
{
    return version >= 3 ? FIXED_LEN : FIXED_LEN_V2;
}

/* The version b's magic (8 bytes) names, 0 for none of the payload's. */
static uint32_t magic_version(const unsigned char *b)
{
    if (memcmp(b, PAYLOAD_MAGIC, 8) == 0)
        return PAYLOAD_VERSION;
    if (memcmp(b, PAYLOAD_MAGIC_V3, 8) == 0)
        return 3;
    return memcmp(b, PAYLOAD_MAGIC_V2, 8) == 0 ? 2 : 0;
}

/* The chunk table's bytes for a piece of n elements (version 4). */
static uint64_t table_bytes(uint64_t n)
{
    return 12 * (uint64_t)msr_tckpt_chunks(n);
}

/* The header: the fixed part, meta and its NUL padded to 8, the ranges. */
static size_t head_len(size_t fixed, size_t meta_len, uint64_t nranges)
{
    return ((fixed + meta_len + 1 + 7) & ~(size_t)7) + (size_t)nranges * 16;
}

static void put_u32(unsigned char **p, uint32_t v)
{
    memcpy(*p, &v, 4);
    *p += 4;
}

static void put_u64(unsigned char **p, uint64_t v)
{
    memcpy(*p, &v, 8);
    *p += 8;
}

static uint32_t get_u32(const unsigned char **p)
{
    uint32_t v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

static uint64_t get_u64(const unsigned char **p)
{
    uint64_t v;
    memcpy(&v, *p, 8);
    *p += 8;
    return v;
}

/* The pieces a range of n elements is written as (v3: at most
 * MSR_TCKPT_PIECE_MAX elements each). */
static uint64_t pieces_of(uint64_t n)
{
    return (n + MSR_TCKPT_PIECE_MAX - 1) / MSR_TCKPT_PIECE_MAX;
}

/* The CRC every piece's starts from: of the header's fields after the
 * version and length (step ... the layout), so a damaged field of the
 * header fails every piece's check. */
static uint32_t head_crc(const unsigned char *b, uint32_t version)
{
    return msr_crc32(0, b + 16, fixed_len(version) - 16);
}

/* The CRC a piece's starts from: the header's, then its (lo, n) as
 * written. */
static uint32_t piece_crc_start(uint32_t head, uint64_t lo, uint32_t n32)
{
    return msr_crc32(msr_crc32(head, &lo, sizeof lo), &n32, sizeof n32);
}

/* The chunks' crcs of the n floats at a into out (NULL: not kept), and
 * crc continued over them (combined from theirs: each byte CRC'd once). */
static uint32_t array_crc(uint32_t crc, const float *a, size_t n, unsigned char *out)
{
    for (size_t at = 0; at < n; at += MSR_TCKPT_CRC_CHUNK) {
        size_t bytes = MSR_MIN(n - at, (size_t)MSR_TCKPT_CRC_CHUNK) * sizeof(float);
        uint32_t c = msr_crc32(0, a + at, bytes);
        if (out != NULL) {
            memcpy(out, &c, 4);
            out += 4;
        }
        crc = msr_crc32_combine(crc, c, bytes);
    }
    return crc;
}

/* A piece's CRC: the header's, then its (lo, n) as written, then its
 * parameters and moments; with table, its chunks' crcs written there
 * (params', m's, v's). */
static uint32_t piece_crc(uint32_t head, uint64_t lo, uint32_t n32, const float *params,
                          const float *m, const float *v, unsigned char *table)
{
    size_t n = n32, k = msr_tckpt_chunks(n);
    uint32_t crc = piece_crc_start(head, lo, n32);
    if (table == NULL) {
        crc = msr_crc32(crc, params, n * sizeof(float));
        crc = msr_crc32(crc, m, n * sizeof(float));
        return msr_crc32(crc, v, n * sizeof(float));
    }
    crc = array_crc(crc, params, n, table);
    crc = array_crc(crc, m, n, table + 4 * k);
    return array_crc(crc, v, n, table + 8 * k);
}

/* Writes the range table and the pieces of ranges[0..n) from p (the end
 * of the header's fixed part and meta), then (seal) the chunk table. */
static void put_pieces(unsigned char *p, uint32_t head, const msr_tckpt_range_t *ranges, uint32_t n,
                       int seal)
{
    unsigned char *data = p, *table;
    for (uint32_t k = 0; k < n; k++)
        data += 16 * pieces_of(ranges[k].n);
    table = data;
    for (uint32_t k = 0; k < n; k++)
        table += 12 * ranges[k].n;
    for (uint32_t k = 0; k < n; k++) {
        const msr_tckpt_range_t *r = &ranges[k];
        for (uint64_t at = 0; at < r->n; at += MSR_TCKPT_PIECE_MAX) {
            size_t c = (size_t)MSR_MIN(r->n - at, (uint64_t)MSR_TCKPT_PIECE_MAX),
                   bytes = c * sizeof(float);
            put_u64(&p, r->lo + at);
            put_u32(&p, (uint32_t)c);
            put_u32(&p, seal ? piece_crc(head, r->lo + at, (uint32_t)c, r->params + at, r->m + at,
                                         r->v + at, table)
                             : 0);
            memcpy(data, r->params + at, bytes);
            memcpy(data + bytes, r->m + at, bytes);
            memcpy(data + 2 * bytes, r->v + at, bytes);
            data += 3 * bytes;
            table += table_bytes(c);
        }
    }
}

/* Checks h and ranges[0..n) and gives the meta's length, the pieces, the
 * header's length (with the range table) and the payload's. */
static msr_status_t encode_plan(const msr_tckpt_header_t *h, const msr_tckpt_range_t *ranges,
                                uint32_t n, size_t *meta_len_p, uint64_t *pieces_p, size_t *hl_p,
                                size_t *len_p)
{
    size_t meta_len = h->meta != NULL ? strlen(h->meta) : 0;
    uint64_t floats = 0, pieces = 0, table = 0;
    int bad = meta_len >= MSR_TCKPT_META_MAX || h->world == 0 || h->world > MAX_WORLD ||
              h->rank >= h->world;
    for (uint32_t k = 0; k < n && !bad; k++) {
        bad = ranges[k].n == 0 || ranges[k].lo > h->num_params ||
              ranges[k].n > h->num_params - ranges[k].lo ||
              (k > 0 && ranges[k].lo < ranges[k - 1].lo + ranges[k - 1].n);
        floats += 3 * ranges[k].n;
        pieces += pieces_of(ranges[k].n);
        table += table_bytes(ranges[k].n); /* its pieces' (MSR_TCKPT_PIECE_MAX: whole chunks) */
    }
    if (bad || pieces > UINT32_MAX) {
        return msr_err(MSR_ERR_INVALID_ARG,
                       "checkpoint: inconsistent shard (rank %u of %u, %u ranges of %" PRIu64
                       " parameters, meta %zu bytes)",
                       h->rank, h->world, n, h->num_params, meta_len);
    }
    *meta_len_p = meta_len;
    *pieces_p = pieces;
    *hl_p = head_len(FIXED_LEN, meta_len, pieces);
    *len_p = *hl_p + (size_t)floats * sizeof(float) + (size_t)table;
    return MSR_OK;
}

/* The header's fixed part and meta into buf (zeroed, hl bytes at least). */
static void put_fixed(unsigned char *buf, const msr_tckpt_header_t *h, size_t meta_len,
                      uint64_t pieces, size_t hl)
{
    unsigned char *p = buf;
    memcpy(p, PAYLOAD_MAGIC, 8);
    p += 8;
    put_u32(&p, PAYLOAD_VERSION);
    put_u32(&p, (uint32_t)hl);
    put_u64(&p, h->step);
    put_u64(&p, h->adam_t);
    put_u64(&p, h->data_seed);
    put_u64(&p, h->data_position);
    put_u64(&p, h->num_params);
    put_u32(&p, h->rank);
    put_u32(&p, h->world);
    put_u32(&p, h->zero);
    put_u32(&p, (uint32_t)pieces);
    put_u32(&p, (uint32_t)meta_len);
    const uint32_t layout[6] = {h->tp, h->pp, h->cp, h->ep, h->chunks, h->sp};
    for (int k = 0; k < 6; k++)
        put_u32(&p, layout[k]);
    memcpy(p, h->meta, meta_len); /* the NUL and padding are the buffer's zeros */
}

static msr_status_t encode(const msr_tckpt_header_t *h, const msr_tckpt_range_t *ranges, uint32_t n,
                           int seal, void **buf_p, size_t *len_p)
{
    size_t meta_len, hl, len;
    uint64_t pieces;
    msr_status_t st = encode_plan(h, ranges, n, &meta_len, &pieces, &hl, &len);
    if (st != MSR_OK)
        return st;
    unsigned char *buf = msr_calloc(len, 1);
    if (buf == NULL) {
        return msr_err(MSR_ERR_NO_MEMORY, "checkpoint: out of memory for a shard of %zu bytes",
                       len);
    }
    (void)msr_prefault(buf, len); /* mapped at once, not a fault every 4 KiB of the copy */
    put_fixed(buf, h, meta_len, pieces, hl);
    put_pieces(buf + hl - (size_t)pieces * 16, head_crc(buf, PAYLOAD_VERSION), ranges, n, seal);
    *buf_p = buf;
    *len_p = len;
    return MSR_OK;
}

msr_status_t msr_tckpt_encode_head(const msr_tckpt_header_t *h, const msr_tckpt_range_t *ranges,
                                   uint32_t n, void **head_p, size_t *hl_p, size_t *len_p)
{
    size_t meta_len, hl, len;
    uint64_t pieces;
    msr_status_t st = encode_plan(h, ranges, n, &meta_len, &pieces, &hl, &len);
    if (st != MSR_OK)
        return st;
    unsigned char *head = msr_calloc(hl, 1);
    if (head == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "checkpoint: out of memory for a header of %zu bytes",
                       hl);
    put_fixed(head, h, meta_len, pieces, hl);
    unsigned char *p = head + hl - (size_t)pieces * 16;
    for (uint32_t k = 0; k < n; k++)
        for (uint64_t at = 0; at < ranges[k].n; at += MSR_TCKPT_PIECE_MAX) {
            put_u64(&p, ranges[k].lo + at);
            put_u32(&p, (uint32_t)MSR_MIN(ranges[k].n - at, (uint64_t)MSR_TCKPT_PIECE_MAX));
            put_u32(&p, 0); /* the CRC: msr_tckpt_head_set_crc */
        }
    *head_p = head;
    *hl_p = hl;
    *len_p = len;
    return MSR_OK;
}

void msr_tckpt_head_set_crc(void *head, size_t hl, uint32_t pieces, uint32_t j, uint32_t crc)
{
    memcpy((unsigned char *)head + hl - (size_t)(pieces - j) * 16 + 12, &crc, 4);
}

msr_status_t msr_tckpt_encode(const msr_tckpt_header_t *h, const msr_tckpt_range_t *ranges,
                              uint32_t n, void **buf_p, size_t *len_p)
{
    return encode(h, ranges, n, 1, buf_p, len_p);
}

msr_status_t msr_tckpt_encode_unsealed(const msr_tckpt_header_t *h, const msr_tckpt_range_t *ranges,
                                       uint32_t n, void **buf_p, size_t *len_p)
{
    return encode(h, ranges, n, 0, buf_p, len_p);
}

msr_status_t msr_tckpt_head_len(const void *prefix, size_t len, size_t *hl_p)
{
    const unsigned char *b = prefix, *p = b + 12;
    if (len < MSR_TCKPT_PREFIX_LEN || magic_version(b) == 0)
        return msr_err(MSR_ERR_CORRUPT, "checkpoint: not a train_gpt shard");
    *hl_p = get_u32(&p);
    return MSR_OK;
}

/* The header of b[0..len) (len >= FIXED_LEN_V2, magic checked) into *h_p,
 * its piece count and length; 0 when it is consistent for a payload of
 * total bytes whose first len are at b. */
static int head_decode(const unsigned char *b, size_t len, size_t total, msr_tckpt_header_t *h_p,
                       uint32_t *n_p, uint32_t *hl_p)
{
    const unsigned char *p = b + 8;
    msr_tckpt_header_t h;
    uint32_t version = get_u32(&p), hl = get_u32(&p);
    h.step = get_u64(&p);
    h.adam_t = get_u64(&p);
    h.data_seed = get_u64(&p);
    h.data_position = get_u64(&p);
    h.num_params = get_u64(&p);
    h.rank = get_u32(&p);
    h.world = get_u32(&p);
    h.zero = get_u32(&p);
    uint32_t n = get_u32(&p), meta_len = get_u32(&p);
    size_t fixed = fixed_len(version);
    h.version = version;
    h.tp = h.pp = h.cp = h.ep = h.chunks = h.sp = 0; /* version 2: not recorded */
    if (version >= 3 && len >= FIXED_LEN) {
        h.tp = get_u32(&p);
        h.pp = get_u32(&p);
        h.cp = get_u32(&p);
        h.ep = get_u32(&p);
        h.chunks = get_u32(&p);
        h.sp = get_u32(&p);
    }
    h.head_crc = len >= fixed ? head_crc(b, version) : 0;
    *h_p = h;
    if (version != magic_version(b) || len < fixed || meta_len >= MSR_TCKPT_META_MAX ||
        n > total / 16 || hl != head_len(fixed, meta_len, n) || hl > len || hl > total ||
        b[fixed + meta_len] != '\0' || h.world == 0 || h.world > MAX_WORLD || h.rank >= h.world)
        return -1;
    h_p->meta = (const char *)b + fixed;
    *n_p = n;
    *hl_p = hl;
    return 0;
}

/* The range table of a decoded header: each piece's range, CRC and byte
 * offset in the payload, and in version 4 its chunk crcs' (data pointers
 * into b when with_data); 0 when they fit total bytes exactly and are in
 * order. */
static int table_decode(const unsigned char *b, size_t total, const msr_tckpt_header_t *h,
                        uint32_t n, uint32_t hl, int with_data, msr_tckpt_range_t *r)
{
    const unsigned char *p = b + hl - (size_t)n * 16;
    uint64_t off = hl, left = total - hl, chunks = 0; /* bytes */
    int bad = 0, v4 = h->version >= 4;
    for (uint32_t k = 0; k < n && !bad; k++) {
        r[k].lo = get_u64(&p);
        if (h->version >= 3) {
            r[k].n = get_u32(&p);
            r[k].crc = get_u32(&p);
        } else {
            r[k].n = get_u64(&p);
        }
        bad = r[k].n == 0 || r[k].lo > h->num_params || r[k].n > h->num_params - r[k].lo ||
              (k > 0 && r[k].lo < r[k - 1].lo + r[k - 1].n) ||
              (h->version >= 3 && r[k].n > MSR_TCKPT_PIECE_MAX);
        /* its floats and chunk crcs fit what is left (n <= num_params < 2^64 / 24) */
        bad = bad || r[k].n > left / 12 || (v4 && table_bytes(r[k].n) > left - 12 * r[k].n);
        if (bad)
            break;
        r[k].offset = off;
        r[k].chunks_offset = chunks; /* in the table, for now */
        if (with_data) {
            const float *f = (const float *)(b + off); /* hl % 8 == 0 */
            r[k].params = f;
            r[k].m = f + r[k].n;
            r[k].v = f + 2 * r[k].n;
        }
        off += 12 * r[k].n;
        left -= 12 * r[k].n;
        if (v4) {
            chunks += table_bytes(r[k].n);
            left -= table_bytes(r[k].n);
        }
    }
    for (uint32_t k = 0; k < n && !bad && v4; k++) { /* the table follows the pieces */
        r[k].chunks_offset += off;
        r[k].chunks = with_data ? b + r[k].chunks_offset : NULL;
    }
    return bad || left != 0;
}

static msr_status_t decode(const void *buf, size_t len, size_t total, int with_data,
                           const char *what, msr_tckpt_header_t *h_p, msr_tckpt_range_t **ranges_p,
                           uint32_t *n_p)
{
    const unsigned char *b = buf;
    msr_tckpt_header_t h;
    uint32_t n = 0, hl = 0;
    if (len < FIXED_LEN_V2 || magic_version(b) == 0) {
        return msr_err(MSR_ERR_CORRUPT, "checkpoint: %s is not a train_gpt shard (%zu bytes)", what,
                       total);
    }
    if (head_decode(b, len, total, &h, &n, &hl) != 0) {
        return msr_err(MSR_ERR_CORRUPT,
                       "checkpoint: %s has an inconsistent header (version %u, rank %u of %u, %u "
                       "ranges)",
                       what, h.version, h.rank, h.world, n);
    }
    msr_tckpt_range_t *r = msr_calloc(n + 1u, sizeof *r);
    if (r == NULL) {
        return msr_err(MSR_ERR_NO_MEMORY, "checkpoint: out of memory reading %s", what);
    }
    if (table_decode(b, total, &h, n, hl, with_data, r) != 0) {
        msr_free(r);
        return msr_err(MSR_ERR_CORRUPT, "checkpoint: %s has ranges that do not fit its %zu bytes",
                       what, total);
    }
    *h_p = h;
    *ranges_p = r;
    *n_p = n;
    return MSR_OK;
}

msr_status_t msr_tckpt_decode(const void *buf, size_t len, const char *what,
                              msr_tckpt_header_t *h_p, msr_tckpt_range_t **ranges_p, uint32_t *n_p)
{
    return decode(buf, len, len, 1, what, h_p, ranges_p, n_p);
}

msr_status_t msr_tckpt_decode_head(const void *head, size_t hl, size_t total, const char *what,
                                   msr_tckpt_header_t *h_p, msr_tckpt_range_t **ranges_p,
                                   uint32_t *n_p)
{
    return decode(head, hl, total, 0, what, h_p, ranges_p, n_p);
}

uint32_t msr_tckpt_piece_crc_start(const msr_tckpt_header_t *h, const msr_tckpt_range_t *r)
{
    return piece_crc_start(h->head_crc, r->lo, (uint32_t)r->n);
}

int msr_tckpt_piece_ok(const msr_tckpt_header_t *h, const msr_tckpt_range_t *r)
{
    if (h->version < 3)
        return 1;
    if (h->version < 4 || r->chunks == NULL)
        return piece_crc(h->head_crc, r->lo, (uint32_t)r->n, r->params, r->m, r->v, NULL) == r->crc;
    /* the chunks' crcs as they are, then the piece's from them: a chunk
     * crc that is not its chunk's fails either way */
    size_t k = msr_tckpt_chunks(r->n);
    const float *a[3] = {r->params, r->m, r->v};
    for (int j = 0; j < 3; j++)
        for (size_t c = 0; c < k; c++) {
            size_t at = c * MSR_TCKPT_CRC_CHUNK,
                   bytes = MSR_MIN(r->n - at, (uint64_t)MSR_TCKPT_CRC_CHUNK) * sizeof(float);
            uint32_t want;
            memcpy(&want, r->chunks + 4 * (j * k + c), 4);
            if (msr_crc32(0, a[j] + at, bytes) != want)
                return 0;
        }
    return msr_tckpt_chunks_ok(h, r, r->chunks);
}

uint32_t msr_tckpt_chunks_crc(const void *crcs, uint64_t n, uint32_t a, uint32_t b)
{
    const unsigned char *t = crcs;
    uint32_t crc = 0, k = msr_tckpt_chunks(n);
    for (uint32_t x = a; x < b && k > 0; x++) {
        uint64_t at = (uint64_t)(x % k) * MSR_TCKPT_CRC_CHUNK;
        uint32_t c;
        memcpy(&c, t + 4 * (size_t)x, 4);
        crc = msr_crc32_combine(crc, c, MSR_MIN(n - at, (uint64_t)MSR_TCKPT_CRC_CHUNK) * 4);
    }
    return crc;
}

int msr_tckpt_chunks_ok(const msr_tckpt_header_t *h, const msr_tckpt_range_t *r, const void *crcs)
{
    uint32_t crc = msr_crc32_combine(
        msr_tckpt_piece_crc_start(h, r),
        msr_tckpt_chunks_crc(crcs, r->n, 0, 3 * msr_tckpt_chunks(r->n)), 12 * r->n);
    return h->version >= 4 && crc == r->crc;
}

size_t msr_tckpt_meta_diff(const char *a, const char *b)
{
    size_t i = 0;
    while (a[i] != '\0' && a[i] == b[i])
        i++;
    while (i > 0 && !(i >= 2 && a[i - 2] == ';' && a[i - 1] == ' '))
        i--;
    return i;
}

msr_status_t msr_tckpt_seal(void *buf, size_t len)
{
    msr_tckpt_header_t h;
    msr_tckpt_range_t *r = NULL;
    uint32_t n = 0;
    size_t hl = 0;
    msr_status_t st = msr_tckpt_decode(buf, len, "a payload to seal", &h, &r, &n);
    if (st == MSR_OK)
        st = msr_tckpt_head_len(buf, len, &hl);
    for (uint32_t k = 0; k < n && st == MSR_OK && h.version >= 3; k++) {
        unsigned char *table = h.version >= 4 ? (unsigned char *)buf + r[k].chunks_offset : NULL;
        uint32_t crc =
            piece_crc(h.head_crc, r[k].lo, (uint32_t)r[k].n, r[k].params, r[k].m, r[k].v, table);
        memcpy((unsigned char *)buf + hl - (size_t)(n - k) * 16 + 12, &crc, 4);
    }
    msr_free(r);
    return st;
}

msr_status_t msr_tckpt_agree_first(msr_ctx_t *ctx, int flag, int *first_p)
{
    uint8_t mine = flag != 0, *all;
    *first_p = -1;
    if (ctx == NULL) {
        *first_p = mine ? 0 : -1;
        return MSR_OK;
    }
    int world = msr_world_size(ctx);
    if ((all = msr_malloc((size_t)world)) == NULL) {
        /* a gather of no bytes: the others' gathers fail (the lengths
         * differ) instead of waiting for this rank's byte */
        uint8_t none;
        (void)msr_allgather(ctx, &none, 0, &none);
        return msr_err(MSR_ERR_NO_MEMORY,
                       "checkpoint: rank %d is out of memory for %d flags agreeing on a load",
                       msr_rank(ctx), world);
    }
    msr_status_t st = msr_allgather(ctx, &mine, 1, all);
    if (st != MSR_OK) {
        msr_free(all);
        return msr_err_call(st, "checkpoint: agreeing on a load with every rank (a rank that "
                                "gave no bytes could not take part: its log says why)");
    }
    for (int r = 0; r < world && *first_p < 0; r++)
        if (all[r])
            *first_p = r;
    msr_free(all);
    return MSR_OK;
}

msr_status_t msr_tckpt_index_total(const void *head, size_t hl, uint64_t *total_p)
{
    const unsigned char *b = head;
    msr_tckpt_header_t h;
    uint32_t n = 0, hl32 = 0;
    if (hl < FIXED_LEN_V2 || magic_version(b) == 0 ||
        head_decode(b, hl, SIZE_MAX, &h, &n, &hl32) != 0 || hl32 != hl)
        return msr_err(MSR_ERR_CORRUPT, "checkpoint: not a train_gpt shard's index");
    const unsigned char *p = b + hl - (size_t)n * 16;
    uint64_t elements = 0, table = 0;
    for (uint32_t k = 0; k < n; k++) {
        (void)get_u64(&p); /* lo */
        uint64_t e = h.version >= 3 ? get_u32(&p) : get_u64(&p);
        if (h.version >= 3)
            (void)get_u32(&p); /* crc */
        if (e > h.num_params - elements)
            return msr_err(MSR_ERR_CORRUPT,
                           "checkpoint: a train_gpt shard's index has pieces of more elements "
                           "than its model's %llu",
                           (unsigned long long)h.num_params);
        /* what a file can hold after libmsrun's header (off_t): its length
         * and every piece's end are then sums that do not wrap */
        /* a chunk's crc adds at most 12 bytes an element to its 12 */
        if (elements + e >
            ((uint64_t)INT64_MAX - MSR_CKPT_HEADER_LEN - hl) / (h.version >= 4 ? 24 : 12))
            return msr_err(MSR_ERR_CORRUPT,
                           "checkpoint: a train_gpt shard's index lays out more bytes than a "
                           "file holds (%llu elements)",
                           (unsigned long long)(elements + e));
        elements += e;
        if (h.version >= 4)
            table += table_bytes(e);
    }
    *total_p = hl + 12 * elements + table;
    return MSR_OK;
}

int msr_tckpt_find_cut(int fd, uint64_t size, msr_tckpt_cut_t *cut_p)
{
    /* the payload follows libmsrun's header (msrun/checkpoint.h) */
    unsigned char prefix[MSR_TCKPT_PREFIX_LEN];
    msr_tckpt_cut_t c = {.size = size, .at = MSR_CKPT_HEADER_LEN, .head = MSR_TCKPT_PREFIX_LEN};
    if (size < c.at + 8) /* cut before the payload's magic: nothing to say more from */
        return 0;
    size_t got = size - c.at < sizeof prefix ? (size_t)(size - c.at) : sizeof prefix;
    if (pread(fd, prefix, got, (off_t)c.at) != (ssize_t)got || magic_version(prefix) == 0)
        return 0;
    if (got == sizeof prefix && msr_tckpt_head_len(prefix, sizeof prefix, &c.head) != MSR_OK)
        return 0;
    if (size - c.at < c.head) { /* the pieces' offsets are past the cut too */
        *cut_p = c;
        return 1;
    }
    unsigned char *head = msr_malloc(c.head);
    msr_tckpt_header_t h;
    msr_tckpt_range_t *r = NULL;
    uint32_t n = 0, k = 0;
    uint64_t total = 0;
    int cut = head != NULL && pread(fd, head, c.head, (off_t)c.at) == (ssize_t)c.head &&
              msr_tckpt_index_total(head, c.head, &total) == MSR_OK && total > size - c.at &&
              msr_tckpt_decode_head(head, c.head, (size_t)total, "a file cut short", &h, &r, &n) ==
                  MSR_OK;
    while (cut && k < n && r[k].offset + 12 * r[k].n <= size - c.at)
        k++; /* the first piece the missing bytes cut */
    /* every piece whole: the cut is in the chunk table (version 4) */
    cut = cut && (k < n || (n > 0 && h.version >= 4));
    if (cut) {
        c.want = c.at + total;
        c.piece = r[k < n ? k : 0];
        c.piece.offset += c.at;
        c.in_chunks = k == n;
        c.chunks_at = c.at + (n > 0 ? r[0].chunks_offset : total);
        *cut_p = c;
    }
    msr_free(r);
    msr_free(head);
    return cut;
}

void msr_tckpt_cut_say(const msr_tckpt_cut_t *c, const char *what, const char *tensor, char *out,
                       size_t len)
{
    if (c->want == 0)
        snprintf(out, len,
                 "%s is cut short inside its header and index: %" PRIu64 " bytes, of which the "
                 "payload's header and index (from byte %" PRIu64 ") take %zu%s",
                 what, c->size, c->at, c->head,
                 c->size - c->at < MSR_TCKPT_PREFIX_LEN ? " or more" : "");
    else if (c->in_chunks)
        snprintf(out, len,
                 "%s is cut short: %" PRIu64 " bytes, its index gives %" PRIu64
                 "; the cut falls inside the chunk table after its pieces (bytes [%" PRIu64
                 ", %" PRIu64 ") of the file)",
                 what, c->size, c->want, c->chunks_at, c->want);
    else
        snprintf(out, len,
                 "%s is cut short: %" PRIu64 " bytes, its index gives %" PRIu64
                 "; the cut falls %s the piece %s%s%s(elements [%" PRIu64 ", %" PRIu64
                 ") of the whole model, bytes [%" PRIu64 ", %" PRIu64 ") of the file)",
                 what, c->size, c->want, c->piece.offset < c->size ? "inside" : "at the start of",
                 tensor != NULL ? "of tensor " : "", tensor != NULL ? tensor : "",
                 tensor != NULL ? " " : "", c->piece.lo, c->piece.lo + c->piece.n, c->piece.offset,
                 c->piece.offset + 12 * c->piece.n);
}

const char *msr_tckpt_tensor_name(const struct msr_gpt *m, uint64_t g)
{
    for (int k = 0; m != NULL && k < m->num_tensors; k++)
        if (g >= m->tensors[k].offset && g < m->tensors[k].offset + m->tensors[k].count)
            return m->tensors[k].name;
    return m != NULL ? "experts" : "?";
}

int msr_tckpt_explain_cut(void *arg, int fd, uint64_t size, const char *what, char *out, size_t len)
{
    const msr_gpt_t *m = arg;
    msr_tckpt_cut_t c;
    if (!msr_tckpt_find_cut(fd, size, &c))
        return 0;
    msr_tckpt_cut_say(&c, what, m != NULL ? msr_tckpt_tensor_name(m, c.piece.lo) : NULL, out, len);
    return 1;
}

int msr_tckpt_exit_status(msr_status_t st)
{
    switch (st) {
    case MSR_OK:
        return 0;
    case MSR_ERR_CORRUPT:
    case MSR_ERR_CONFIG:
    case MSR_ERR_NOT_FOUND:
        return 2;
    default:
        return 1;
    }
}

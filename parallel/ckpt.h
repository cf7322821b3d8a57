/* The trainer's checkpoint payload: the bytes one rank hands to libmsrun's
 * msr_ckpt_save (include/msrun/checkpoint.h), which writes them atomically
 * with a CRC, marks the step complete once every rank has saved, and finds
 * the latest complete step after a restart. This file only says what the
 * bytes are: the rank's pieces of the training state and what they cover.
 *
 * The format is layout-free: a range is of the whole model's flat
 * numbering (ckpt_map.h: model/gpt.h's tensor table in order, each tensor
 * row-major at its full_offset, then the whole model's experts in
 * model/moe.h's numbering), whatever part of the model the writer held
 * (tp slice, pipeline stages, ZeRO shard). A tensor's global shape and
 * name follow from the model's shape, which the settings text (meta)
 * fixes, so a range names a box of tensors. See docs/checkpoint.md.
 *
 * Payload (integers in the writer's byte order; the magic rejects the
 * other):
 *
 *   "MSRTRN04"                                    8 bytes
 *   u32 version (4), u32 header bytes             (everything before the floats)
 *   u64 step, adam_t, data_seed, data_position, num_params
 *   u32 rank, world, zero, num_ranges, meta_len
 *   u32 tp, pp, cp, ep, chunks, sp                 the layout that wrote it
 *   meta_len bytes of text (the run's settings), NUL, zero padding to 8
 *   num_ranges x (u64 lo, u32 n, u32 crc)          pieces: global elements
 *                                                  [lo, lo + n), increasing and
 *                                                  disjoint, n <= MSR_TCKPT_PIECE_MAX
 *   for each piece: f32 params[n], f32 m[n], f32 v[n]
 *   for each piece: u32 crc of each chunk          the chunk table: its params'
 *                   of params, then of m, then v   chunks, m's, v's, each
 *                                                  MSR_TCKPT_CRC_CHUNK floats
 *                                                  (the last of an array shorter)
 *
 * A piece's crc is the CRC-32 of the header's fields from step to
 * sp, then of its (lo, n) as written, then of its floats: a damaged
 * header field, table entry or float fails the check of the pieces read.
 * A chunk's crc is msr_crc32(0, its bytes). A reader that needs a part of
 * a piece reads the piece's chunk crcs, checks that they combine into the
 * piece's crc (msr_crc32_combine: the chunk table is checked by the
 * piece's crc without its floats), then reads only the chunks it needs,
 * each checked by its own crc (msr_tckpt_chunks_ok).
 *
 * The header and range table are the payload's index: piece k's bytes
 * start at header bytes + 12 x (the n of the pieces before it), so a
 * reader that needs a few pieces reads the header, then only those
 * pieces (msr_ckpt_read_rank), and checks each with its CRC.
 *
 * rank and world are of the saving job's world (every model-parallel rank
 * writes a payload); num_params counts the whole model. The ranks'
 * payloads together hold every element at least once (tp-replicated
 * tensors once per tp rank), so any layout picks its pieces out of them.
 * "MSRTRN03" (version 3) payloads decode too: the same without the chunk
 * table (read a piece whole to check it).
 * "MSRTRN02" (version 2) payloads decode too (no layout fields, ranges
 * (u64 lo, u64 n), no CRCs, pieces of any length): their ranges were the writer's local flat
 * elements, the same numbering when it ran without
 * model parallel; a model-parallel one is refused by its settings text,
 * which named the layout. */
#ifndef MSR_PARALLEL_CKPT_H
#define MSR_PARALLEL_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "msrun/store.h"

struct msr_gpt; /* model/gpt.h */

#define MSR_TCKPT_META_MAX   4096
/* The most elements of one piece (12 MiB of parameters and moments): the
 * unit of a CRC and of a partial read, so a reader's buffer is bounded. */
#define MSR_TCKPT_PIECE_MAX  (1u << 20)
/* A chunk's elements: the unit of a partial read's check (4 KiB of one
 * array). MSR_TCKPT_PIECE_MAX is a multiple of it. */
#define MSR_TCKPT_CRC_CHUNK  1024u
/* A payload's first bytes: what msr_tckpt_head_len needs (and the step). */
#define MSR_TCKPT_PREFIX_LEN 24

typedef struct msr_tckpt_header {
    uint64_t step;          /* optimizer steps done */
    uint64_t adam_t;        /* AdamW's step count */
    uint64_t data_seed;     /* the sampler's state: seed ... */
    uint64_t data_position; /* ... and samples drawn */
    uint64_t num_params;    /* of the whole model */
    uint32_t rank, world;   /* who wrote it, of how many (data-parallel ranks) */
    uint32_t zero;          /* the writer's ZeRO stage (informative) */
    const char *meta;       /* NUL-terminated, < MSR_TCKPT_META_MAX bytes */
    /* the layout that wrote it (informative: any layout loads it; 0 when
     * not recorded: version 2, or a writer that does not say) */
    uint32_t tp, pp, cp, ep, chunks, sp;
    uint32_t version;  /* decoded: 2, 3 or 4 (encode writes 4) */
    uint32_t head_crc; /* decoded: where the pieces' CRCs start (ckpt.c) */
} msr_tckpt_header_t;

/* Flat elements [lo, lo + n) with their parameters and AdamW moments.
 * Encoding, a range may be longer than a piece (it is cut into pieces);
 * decoded, each is one piece with its CRC and its bytes' offset. */
typedef struct msr_tckpt_range {
    uint64_t lo, n;
    const float *params, *m, *v; /* (n) each; NULL from msr_tckpt_decode_head */
    uint32_t crc;                /* decoded (version 3 and 4) */
    uint64_t offset;             /* decoded: params' first byte in the payload */
    uint64_t chunks_offset;      /* decoded (version 4): its chunk crcs' first byte, 0 before */
    const unsigned char *chunks; /* decoded with the payload (version 4): those crcs, else NULL */
} msr_tckpt_range_t;

/* The chunks of one array of a piece of n elements. */
static inline uint32_t msr_tckpt_chunks(uint64_t n)
{
    return (uint32_t)((n + MSR_TCKPT_CRC_CHUNK - 1) / MSR_TCKPT_CRC_CHUNK);
}

/* Builds the payload of h and ranges[0..n) into *buf_p (msr_free it) of
 * *len_p bytes. Errors: MSR_ERR_INVALID_ARG (meta too long, ranges out of
 * order or outside num_params, rank >= world; see msr_err_msg), MSR_ERR_NO_MEMORY. */
msr_status_t msr_tckpt_encode(const msr_tckpt_header_t *h, const msr_tckpt_range_t *ranges,
                              uint32_t n, void **buf_p, size_t *len_p);

/* The header and range table of the payload msr_tckpt_encode makes of
 * h and ranges[0..n), the pieces' CRCs 0, in *head_p (msr_free it) of
 * *hl_p bytes, and the payload's length in *len_p: for a save that
 * writes the pieces after it one at a time (each piece's parameters, m
 * and v, in the table's order), fills in each piece's CRC
 * (msr_tckpt_head_set_crc: piece j of the table's `pieces`) as it goes,
 * and writes the chunk table last (the chunks' crcs of the pieces in
 * order, as it computed them: *len_p counts them).
 * Errors: msr_tckpt_encode's. */
msr_status_t msr_tckpt_encode_head(const msr_tckpt_header_t *h, const msr_tckpt_range_t *ranges,
                                   uint32_t n, void **head_p, size_t *hl_p, size_t *len_p);
void msr_tckpt_head_set_crc(void *head, size_t hl, uint32_t pieces, uint32_t j, uint32_t crc);

/* Reads a payload: *h_p, and *ranges_p (msr_free it) of *n_p ranges whose
 * pointers, like h_p->meta, point into buf (which must stay alive and be
 * 8-byte aligned, as malloc's are). Errors: MSR_ERR_CORRUPT (wrong magic or
 * version, inconsistent sizes; the error text names `what`), MSR_ERR_NO_MEMORY. */
msr_status_t msr_tckpt_decode(const void *buf, size_t len, const char *what,
                              msr_tckpt_header_t *h_p, msr_tckpt_range_t **ranges_p, uint32_t *n_p);

/* msr_tckpt_encode without the pieces' CRCs (0): the copy a step must
 * make, leaving the CRCs to msr_tckpt_seal in a thread that writes it. */
msr_status_t msr_tckpt_encode_unsealed(const msr_tckpt_header_t *h, const msr_tckpt_range_t *ranges,
                                       uint32_t n, void **buf_p, size_t *len_p);

/* Writes the CRC of every piece of payload buf (len bytes) into its range
 * table: an unsealed payload becomes what msr_tckpt_encode makes (a sealed
 * one stays as it is). Errors: msr_tckpt_decode's. Touches only buf. */
msr_status_t msr_tckpt_seal(void *buf, size_t len);

/* The header length a payload's first len (>= MSR_TCKPT_PREFIX_LEN)
 * bytes give: how much to read before msr_tckpt_decode_head.
 * MSR_ERR_CORRUPT: not a payload's start. */
msr_status_t msr_tckpt_head_len(const void *prefix, size_t len, size_t *hl_p);

/* msr_tckpt_decode from only the header and range table (head, hl bytes
 * read from the start of a payload of total bytes): the ranges' data
 * pointers are NULL, their offset and crc say where to read and what to
 * check. Same errors. */
msr_status_t msr_tckpt_decode_head(const void *head, size_t hl, size_t total, const char *what,
                                   msr_tckpt_header_t *h_p, msr_tckpt_range_t **ranges_p,
                                   uint32_t *n_p);

/* The payload length that a payload's header and range table (head, hl
 * bytes, as msr_tckpt_head_len gives hl) imply: hl, then 12 bytes per
 * element of every piece. Tells where a payload cut short was cut without
 * the length its file's header records (msr_tckpt_decode_head then checks
 * the table against it). MSR_ERR_CORRUPT: not a consistent header. */
msr_status_t msr_tckpt_index_total(const void *head, size_t hl, uint64_t *total_p);

/* Where a state file cut short was cut: libmsrun refuses such a file
 * when it opens it (its length is not the one its header records), before
 * any piece is read, so the payload's own index, as far as the file goes,
 * says what the missing bytes held. */
typedef struct msr_tckpt_cut {
    uint64_t size;           /* the file's bytes */
    uint64_t at;             /* its payload's first byte (after libmsrun's header) */
    uint64_t want;           /* the file's bytes its index gives; 0: the cut is in that index */
    size_t head;             /* the payload's header and index bytes (at least, want 0) */
    msr_tckpt_range_t piece; /* the first piece the cut reaches; offset: in the file */
    int in_chunks;           /* every piece whole: the cut is in the chunk table (version 4) */
    uint64_t chunks_at;      /* the chunk table's first byte in the file */
} msr_tckpt_cut_t;

/* Whether fd, a state file of size bytes, is shorter than its payload's
 * index says: 1 with *cut_p, else 0 (not cut, or no payload's index as
 * far as it goes: another fault). Reads fd (pread), nothing else. */
int msr_tckpt_find_cut(int fd, uint64_t size, msr_tckpt_cut_t *cut_p);

/* The sentence for cut c of the file named what, whose cut piece starts
 * in the tensor named tensor: "WHAT is cut short: N bytes, its index
 * gives M; the cut falls inside the piece of tensor T (elements [A, B) of
 * the whole model, bytes [X, Y) of the file)" ("at the start of" when the
 * cut is at its first byte; tensor NULL: "the piece (elements ..."), or
 * "... cut short inside its header and index ..." when want is 0, or
 * "... the cut falls inside the chunk table after its pieces ..." when
 * in_chunks. Into out (len bytes). */
void msr_tckpt_cut_say(const msr_tckpt_cut_t *c, const char *what, const char *tensor, char *out,
                       size_t len);

/* The tensor of whole model m's table (model/gpt.h) that holds the
 * whole model's flat element g (ckpt_map.h's numbering): its name, or
 * "experts" past the table's elements; "?" when m is NULL. */
const char *msr_tckpt_tensor_name(const struct msr_gpt *m, uint64_t g);

/* A msr_ckpt_cut_fn (msrun/checkpoint.h: msr_ckpt_latest_explain) for the
 * trainer's state files: with arg a whole model (const msr_gpt_t *; NULL:
 * pieces named by their elements only), when msr_tckpt_find_cut finds fd
 * cut short, msr_tckpt_cut_say's sentence about `what` into out, 1; else
 * 0. Reads fd only. */
int msr_tckpt_explain_cut(void *arg, int fd, uint64_t size, const char *what, char *out,
                          size_t len);

/* Whether piece r's params, m and v (contiguous, as in a payload) match
 * its CRC (always for version 2, which has none), and in version 4 its
 * chunk crcs (r->chunks) match its chunks. */
int msr_tckpt_piece_ok(const msr_tckpt_header_t *h, const msr_tckpt_range_t *r);

/* Version 4: whether crcs (the 3 x msr_tckpt_chunks(r->n) chunk crcs of
 * piece r, as in its payload's chunk table) combine into the piece's
 * crc: then each chunk's crc may check that chunk alone. */
int msr_tckpt_chunks_ok(const msr_tckpt_header_t *h, const msr_tckpt_range_t *r, const void *crcs);

/* The CRC-32 (msr_crc32(0, ...)) that chunks [a, b) of a piece of n
 * elements have together, from its chunk crcs (crcs, as in the chunk
 * table: chunk x is the (x mod k)-th of array x / k, k =
 * msr_tckpt_chunks(n), so a run may cross from one array into the next,
 * as the bytes do; crcs may also start at an array's first chunk, with a
 * and b below k). */
uint32_t msr_tckpt_chunks_crc(const void *crcs, uint64_t n, uint32_t a, uint32_t b);

/* A piece's CRC checked as its bytes arrive: msr_crc32 continued from
 * this over the piece's 3 * r->n floats, in the order of the payload
 * (params, m, v), equals r->crc when the piece is intact (version 3; a
 * version 2 piece has no CRC). Lets a reader check each chunk it reads
 * while the chunk is in the cache. */
uint32_t msr_tckpt_piece_crc_start(const msr_tckpt_header_t *h, const msr_tckpt_range_t *r);

/* The bytes a reader of pieces reads at a time (and checks while they are
 * in the cache). */
#define MSR_TCKPT_READ_CHUNK ((size_t)1 << 20)

/* Where metas a and b first differ, backed up to the start of that "; "-
 * separated field: a message about other settings shows both from there
 * (a whole meta does not fit one error text). 0 when the first differs. */
size_t msr_tckpt_meta_diff(const char *a, const char *b);

/* The exit status of a program whose checkpoint read ended with st
 * (docs/checkpoint.md, "Exit status"): 0 for MSR_OK; 2 (bad input) when
 * the checkpoint itself is at fault, so the same files fail the same way
 * on every retry: its bytes (MSR_ERR_CORRUPT: cut short, a damaged piece,
 * index or header), its settings (MSR_ERR_CONFIG: another model's) or a
 * file its commit record names that is not there (MSR_ERR_NOT_FOUND); 1
 * for every other error,
 * the machine's: an I/O error reading an intact file, memory, the store,
 * a lost peer (the same files may load on a retry). */
int msr_tckpt_exit_status(msr_status_t st);

/* Every rank of ctx's job calls it with its flag (after a load: whether
 * it found its file damaged); *first_p is then, on every rank alike, the
 * lowest rank whose flag is set, or -1. The ranks gather a byte each. A
 * rank that cannot allocate the world's bytes still takes part, giving
 * none, so that no rank waits for it: every rank's call then fails
 * (MSR_ERR_NO_MEMORY there, MSR_ERR_INVALID_ARG on the others, whose
 * text names the rank that gave none). ctx NULL: a job of one rank. */
msr_status_t msr_tckpt_agree_first(msr_ctx_t *ctx, int flag, int *first_p);

#endif

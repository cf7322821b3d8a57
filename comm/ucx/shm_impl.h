/* The shared-memory segment of a group on one node, as shm.c lays it out
 * and both its paths read it: the slots (shm_slots.c) and the tiles
 * (shm_tiles.c). Private to comm/ucx. */
#ifndef MSRUN_COMM_UCX_SHM_IMPL_H
#define MSRUN_COMM_UCX_SHM_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define LINE 64

/* A member's counters, on its own cache line; only the member writes them.
 * seq: the last operation it published. The tiled path counts tiles over
 * the communicator's life: in, the tiles it staged; red, the tiles whose
 * stage slots it finished reading; out, the tiles it finished with. */
enum { C_SEQ, C_IN, C_RED, C_OUT, C_N };

#define SHM_INLINE 16 /* vectors up to this size travel in the counters' line */

/* Vectors above SHM_INLINE up to the segment's lined_max (at most
 * SHM_LINED_MAX) travel lined: each cache line of a member's lined area
 * holds SHM_LINE_DATA bytes of the vector and, in its last 8 bytes, the
 * number of the operation that wrote them. The reader loads a line only
 * after its own word showed the operation: the transfer that publishes the
 * line also carries its data, and the lines of one vector travel together
 * instead of after a separate sequence line. The lined areas are written
 * by nothing else (no ring, no plain slot), so a word holds only a number
 * its member wrote, never stale data that could look like one. */
#define SHM_LINE_DATA  56
#define SHM_LINED_MAX  128 /* above, the plain slots were faster (docs/performance.md) */
/* A group of two on a machine with a CPU for each of its ranks: its lined
 * vectors go up to SHM_LINED_PAIR bytes (MSR_COMM_SHM_LINED_PAIR lowers
 * it, to SHM_LINED_MAX at least). The
 * reader copies each line of its peer's out as soon as the line's word
 * shows the operation (into pair_vec, or an allgather's place), so the
 * peer's later lines arrive while the earlier ones are copied, and folds
 * the whole vector once; through the slots the reader would wait for the
 * peer's word, written after its last byte, before the first transfer of
 * its data (docs/comm.md, docs/performance.md). */
#define SHM_LINED_PAIR 4096

/* Broadcasts of 1 to SHM_BCAST_WIDTH x SHM_LINE_DATA bytes travel lined
 * too, through SHM_BCAST_WIDTH rings of SHM_BCAST_LINES lines of their
 * own: broadcast k's root writes each line's piece of its vector and then
 * k into that line's word, in line k % SHM_BCAST_LINES of ring 0 (and of
 * ring i for the bytes past i lines' data), and the readers wait for those
 * words alone, so the transfers that show them k also bring the data (the
 * slots' ring below needs two in a row: the root's sequence line, then the
 * entry). Nothing but a broadcast's root writes these lines, and only
 * whole operation numbers into their words. The root overwrites a line
 * only when every member finished the broadcast SHM_BCAST_LINES
 * operations before (it runs up to that far ahead). */
#define SHM_BCAST_LINES 128
#define SHM_BCAST_WIDTH 8

static inline size_t shm_lines(size_t bytes)
{
    return (bytes + SHM_LINE_DATA - 1) / SHM_LINE_DATA;
}

typedef struct shm_ctl {
    _Atomic uint64_t c[C_N];
    char inl[2][SHM_INLINE];
} shm_ctl_t;

_Static_assert(sizeof(shm_ctl_t) == LINE, "a member's counters fill one cache line");

#define NT_SAMPLES 4

struct ucx_shm {
    void *base;
    size_t len;
    shm_ctl_t *ctl;
    char *slots;
    size_t slot;
    char *lined;      /* per member, 2 areas of lined_area bytes */
    size_t lined_max; /* vectors up to this travel lined (0: none) */
    size_t lined_area;
    char *bcast;  /* the lined broadcasts' rings (NULL: none) */
    char *stage;  /* per member, depth slots of tile bytes */
    char *result; /* depth slots of tile bytes (allreduce) */
    size_t tile;  /* 0: no tiled path */
    uint64_t depth;
    int n;
    /* the slots' reuse, on this member alone (every member counts the same
     * operations): data_op[p], the last operation of parity p whose members
     * each wrote their own slot (allreduce, reduce-scatter, allgather) */
    uint64_t data_op[2];
    /* broadcasts go through a ring per parity p over the members' slots p
     * (shm_slots.c): the stride of its entries now, its last broadcast,
     * the last one with another stride; and where the operation placed
     * last (ring_booked) writes or reads */
    size_t ring_stride[2];
    uint64_t ring_last[2], ring_other[2], ring_booked;
    uint64_t ring_seen; /* the least number the other members showed a root last */
    uint64_t peer_seq;  /* a two-member group's: the highest number the peer showed */
    /* a two-member group's: the peer's lined vector of an allreduce or
     * a reduce-scatter, copied out line by line as the lines arrive */
    _Alignas(LINE) char pair_vec[SHM_LINED_PAIR];
    char *ring_cur;
    /* MSR_COMM_SHM_NT=auto: per size class (log2 of the bytes), how long
     * the last NT_SAMPLES operations took per KiB with plain stores [0] and
     * bypassing the cache [1] (0: not measured), and operations seen */
    uint64_t ns_per_kib[64][2][NT_SAMPLES];
    uint32_t ops[64], next[64][2];
};

static inline char *slot_of(const struct ucx_shm *s, int rank, uint64_t k)
{
    return s->slots + ((size_t)rank * 2 + (size_t)(k & 1)) * s->slot;
}

/* Operation k's data of a member: a vector of a few bytes goes in its
 * counters' line, so that the line that publishes it also carries it (one
 * cache-line transfer on the reader's path instead of two); alternating as
 * the slots do. */
static inline char *data_of(const struct ucx_shm *s, int rank, uint64_t k, size_t bytes)
{
    return bytes <= SHM_INLINE ? s->ctl[rank].inl[k & 1] : slot_of(s, rank, k);
}

/* Operation k's lined area of a member (alternating as the slots do). */
static inline char *lined_of(const struct ucx_shm *s, int rank, uint64_t k)
{
    return s->lined + ((size_t)rank * 2 + (size_t)(k & 1)) * s->lined_area;
}

/* The word of line i of a lined area. */
static inline _Atomic uint64_t *line_word(char *area, size_t i)
{
    return (_Atomic uint64_t *)(area + i * LINE + SHM_LINE_DATA);
}

/* From a line of a lined broadcasts' ring to the same line of the next. */
#define BCAST_STRIDE ((size_t)SHM_BCAST_LINES * LINE)

/* The line broadcast k takes in ring i of the lined broadcasts. */
static inline char *bcast_line(const struct ucx_shm *s, uint64_t k, size_t i)
{
    return s->bcast + i * BCAST_STRIDE + (size_t)(k % SHM_BCAST_LINES) * LINE;
}

#endif

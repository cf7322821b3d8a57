/* The last lines of a rank's output (stdout and stderr as they came), kept
 * by its node's msrun for the dashboard's /api/output (docs/observe.md).
 * A fixed ring, no allocation: at most MSR_OUT_TAIL_LINES lines and
 * MSR_OUT_TAIL_BYTES bytes of them, whichever bound is reached first (the
 * oldest lines go), each line cut at MSR_OUT_TAIL_LINE_MAX bytes. Bytes
 * are kept as they are (binary included); whoever shows them escapes. One
 * thread (the agent's loop). */
#ifndef MSR_MSRUN_OUTTAIL_H
#define MSR_MSRUN_OUTTAIL_H

#include <stddef.h>
#include <stdint.h>

#define MSR_OUT_TAIL_LINES    64
#define MSR_OUT_TAIL_BYTES    8192
#define MSR_OUT_TAIL_LINE_MAX 400

typedef struct msr_out_tail {
    char data[MSR_OUT_TAIL_BYTES];      /* the lines' bytes, a ring */
    uint16_t start[MSR_OUT_TAIL_LINES]; /* where each line starts in data, a ring */
    uint16_t len[MSR_OUT_TAIL_LINES];
    int first, count; /* the oldest line's slot, and how many are kept */
    size_t bytes;     /* the kept lines' bytes */
    uint64_t total;   /* lines pushed since the last clear */
} msr_out_tail_t;

/* Empties t (a zeroed struct is empty too). */
void msr_out_tail_clear(msr_out_tail_t *t);

/* Appends a line (without its newline), cut at MSR_OUT_TAIL_LINE_MAX
 * bytes, dropping the oldest lines as the bounds require. Cannot fail. */
void msr_out_tail_push(msr_out_tail_t *t, const char *line, size_t len);

/* Copies the i-th oldest line (0 <= i < t->count) into out (at least
 * MSR_OUT_TAIL_LINE_MAX bytes, not NUL-terminated) and returns its length. */
size_t msr_out_tail_get(const msr_out_tail_t *t, int i, char *out);

#endif

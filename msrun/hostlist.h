/* Slurm's compressed host lists (SLURM_JOB_NODELIST): "n[01-04,07]",
 * "a[1-2]-b[3-4]", "x,y[1-3]" expanded into host names. Pure: no I/O, no
 * global state; any thread may call it. */
#ifndef MSR_MSRUN_HOSTLIST_H
#define MSR_MSRUN_HOSTLIST_H

#include <stddef.h>

#include "msrun/base.h"

/* The most hosts one list may expand to (Slurm's own limit per range is
 * 64K), and the longest host name (a DNS name). */
#define MSR_HOSTLIST_MAX_HOSTS 65536
#define MSR_HOSTLIST_NAME_MAX  255

/* An expanded list: hosts[0 .. count-1], in Slurm's order. */
typedef struct msr_hostlist {
    char **hosts;
    size_t count;
} msr_hostlist_t;

/* Expands text into *out_p. The grammar, as Slurm writes it:
 *   list  = host {',' host}
 *   host  = {literal | '[' items ']'}      (at least one character)
 *   items = item {',' item};  item = DIGITS ['-' DIGITS]
 * Commas inside brackets separate numbers, commas outside separate hosts.
 * A number keeps the width of its range's low bound ("01-10": 01 ... 10);
 * several brackets in one host give every combination, the first bracket
 * varying slowest ("a[1-2]-b[3-4]": a1-b3 a1-b4 a2-b3 a2-b4). Duplicates
 * are kept, as Slurm keeps them.
 *
 * max_hosts (0: MSR_HOSTLIST_MAX_HOSTS) caps the expansion. Returns MSR_OK,
 * MSR_ERR_INVALID_ARG for malformed text (an empty host, '[' without ']',
 * nested brackets, a reversed range "5-3", a non-number in brackets, a name
 * longer than MSR_HOSTLIST_NAME_MAX, a control character), MSR_ERR_OVERFLOW
 * for more hosts than max_hosts, MSR_ERR_NO_MEMORY; msr_err_msg() says what
 * and where. *out_p is written only on success; free it with
 * msr_hostlist_free. */
msr_status_t msr_hostlist_expand(const char *text, size_t max_hosts, msr_hostlist_t *out_p);

/* Frees what msr_hostlist_expand made and zeroes *hl; NULL or an empty
 * list does nothing. */
void msr_hostlist_free(msr_hostlist_t *hl);

#endif

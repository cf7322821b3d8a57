/* The bounded ring of a rank's last output lines (outtail.h). */
#include "launcher/outtail.h"

#include <string.h>

void msr_out_tail_clear(msr_out_tail_t *t)
{
    t->first = t->count = 0;
    t->bytes = 0;
    t->total = 0;
}

static void drop_oldest(msr_out_tail_t *t)
{
    t->bytes -= t->len[t->first];
    t->first = (t->first + 1) % MSR_OUT_TAIL_LINES;
    t->count--;
}

void msr_out_tail_push(msr_out_tail_t *t, const char *line, size_t len)
{
    if (len > MSR_OUT_TAIL_LINE_MAX)
        len = MSR_OUT_TAIL_LINE_MAX;
    while (t->count > 0 && (t->count == MSR_OUT_TAIL_LINES || t->bytes + len > MSR_OUT_TAIL_BYTES))
        drop_oldest(t);
    size_t at = 0;
    if (t->count > 0) {
        int last = (t->first + t->count - 1) % MSR_OUT_TAIL_LINES;
        at = ((size_t)t->start[last] + t->len[last]) % MSR_OUT_TAIL_BYTES;
    }
    size_t head = MSR_OUT_TAIL_BYTES - at < len ? MSR_OUT_TAIL_BYTES - at : len;
    memcpy(t->data + at, line, head);
    memcpy(t->data, line + head, len - head); /* wraps around */
    int slot = (t->first + t->count) % MSR_OUT_TAIL_LINES;
    t->start[slot] = (uint16_t)at;
    t->len[slot] = (uint16_t)len;
    t->count++;
    t->bytes += len;
    t->total++;
}

size_t msr_out_tail_get(const msr_out_tail_t *t, int i, char *out)
{
    if (i < 0 || i >= t->count)
        return 0;
    int slot = (t->first + i) % MSR_OUT_TAIL_LINES;
    size_t at = t->start[slot], len = t->len[slot];
    size_t head = MSR_OUT_TAIL_BYTES - at < len ? MSR_OUT_TAIL_BYTES - at : len;
    memcpy(out, t->data + at, head);
    memcpy(out + head, t->data, len - head);
    return len;
}

/* The progress board at the bottom of msrun's terminal (see board.h). */
#include "launcher/board.h"

#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

/* msrun's own log lines go above the rows. */
static void board_log(void *arg, const char *line, size_t len)
{
    msr_board_t *b = arg;
    msr_buf_t out = {0};
    msr_board_lock(b);
    msr_board_erase(b, &out);
    msr_buf_append(&out, line, len);
    msr_board_draw(b, &out);
    msr_write_all(b->fd, out.data, out.len);
    msr_board_unlock(b);
    msr_buf_cleanup(&out);
}

void msr_board_init(msr_board_t *b, int fd, int active)
{
    memset(b, 0, sizeof *b);
    b->fd = fd;
    b->active = active && isatty(fd);
    pthread_mutex_init(&b->lock, NULL);
    if (b->active)
        msr_log_set_sink(board_log, b);
}

void msr_board_cleanup(msr_board_t *b)
{
    if (b->active) {
        msr_log_set_sink(NULL, NULL);
        msr_buf_t out = {0};
        msr_board_lock(b);
        msr_board_erase(b, &out);
        for (int i = 0; i < b->nrows; i++) {
            if (b->rows[i].len == 0)
                continue;
            msr_buf_append(&out, b->rows[i].text, b->rows[i].len);
            msr_buf_append(&out, "\n", 1);
        }
        b->nrows = 0;
        msr_write_all(b->fd, out.data, out.len);
        msr_board_unlock(b);
        msr_buf_cleanup(&out);
    }
    pthread_mutex_destroy(&b->lock);
}

void msr_board_lock(msr_board_t *b)
{
    pthread_mutex_lock(&b->lock);
}

void msr_board_unlock(msr_board_t *b)
{
    pthread_mutex_unlock(&b->lock);
}

static int find(const msr_board_t *b, const void *key)
{
    for (int i = 0; i < b->nrows; i++)
        if (b->rows[i].key == key)
            return i;
    return -1;
}

int msr_board_has(const msr_board_t *b, const void *key)
{
    return find(b, key) >= 0;
}

int msr_board_set(msr_board_t *b, const void *key, const char *text, size_t len)
{
    int i = find(b, key);
    if (i < 0) {
        if (b->nrows == MSR_BOARD_ROWS)
            return -1;
        i = b->nrows++;
        b->rows[i].key = key;
    }
    if (len > sizeof b->rows[i].text)
        len = sizeof b->rows[i].text;
    memcpy(b->rows[i].text, text, len);
    b->rows[i].len = len;
    return 0;
}

int msr_board_remove(msr_board_t *b, const void *key)
{
    int i = find(b, key);
    if (i < 0)
        return 0;
    memmove(&b->rows[i], &b->rows[i + 1], (size_t)(b->nrows - i - 1) * sizeof b->rows[0]);
    b->nrows--;
    return 1;
}

void msr_board_erase(msr_board_t *b, msr_buf_t *out)
{
    if (b->shown == 0)
        return;
    msr_buf_append(out, "\r", 1);
    if (b->shown > 1)
        msr_buf_printf(out, "\033[%dA", b->shown - 1);
    msr_buf_append(out, "\033[J", 3);
    b->shown = 0;
}

size_t msr_board_fit(const char *text, size_t len, int cols)
{
    int used = 0;
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)text[i];
        if (c == 0x1b) { /* CSI ... final byte: no width */
            size_t j = i + 1;
            if (j < len && text[j] == '[') {
                j++;
                while (j < len &&
                       !((unsigned char)text[j] >= 0x40 && (unsigned char)text[j] <= 0x7e))
                    j++;
            }
            i = j < len ? j + 1 : len;
            continue;
        }
        if ((c & 0xc0) != 0x80) { /* the first byte of a character */
            if (used == cols)
                break;
            used++;
        }
        i++;
    }
    return i;
}

void msr_board_draw(msr_board_t *b, msr_buf_t *out)
{
    if (!b->active || b->nrows == 0)
        return;
    struct winsize ws;
    if (ioctl(b->fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
        b->cols = ws.ws_col;
        b->height = ws.ws_row;
    }
    int cols = b->cols > 1 ? b->cols - 1 : 79;
    int rows = b->nrows;
    if (b->height > 1 && rows > b->height - 1)
        rows = b->height - 1;
    for (int i = 0; i < rows; i++) {
        const msr_board_row_t *r = &b->rows[b->nrows - rows + i]; /* the newest */
        if (i > 0)
            msr_buf_append(out, "\n", 1);
        msr_buf_append(out, r->text, msr_board_fit(r->text, r->len, cols));
        if (memchr(r->text, 0x1b, r->len))
            msr_buf_append(out, "\033[0m", 4); /* a colour the cut left on ends here */
    }
    b->shown = rows;
}

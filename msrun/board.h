/* The progress board: on a terminal, the workers' progress lines (those a
 * carriage return keeps rewriting, as tqdm's bars) live in rows at the
 * bottom of the screen, one per stream, each showing that rank's latest
 * state; everything else scrolls above them. Each update is one write of
 * "erase the rows, the new lines, draw the rows again" (ANSI cursor-up and
 * erase-below), so the screen never shows half of it.
 *
 * The rows are keyed by their stream. The agent's thread changes them; a
 * lock makes msrun's own log lines (from any thread, through the log hook)
 * go above the rows too. Where the output is not a terminal the board is
 * off and progress lines pass through with their carriage returns. */
#ifndef MSR_MSRUN_BOARD_H
#define MSR_MSRUN_BOARD_H

#include <pthread.h>
#include <stddef.h>

#include "base/buf.h"

#define MSR_BOARD_ROWS 64  /* rows kept; more streams than this pass through */
#define MSR_BOARD_TEXT 512 /* bytes of a row's text kept */

typedef struct msr_board_row {
    const void *key;
    char text[MSR_BOARD_TEXT];
    size_t len;
} msr_board_row_t;

typedef struct msr_board {
    int fd;     /* the terminal */
    int active; /* fd is a terminal: rows are drawn */
    msr_board_row_t rows[MSR_BOARD_ROWS];
    int nrows;
    int shown;        /* rows on the screen now (the cursor ends the last one) */
    int cols, height; /* the terminal's size at the last draw (0: unknown) */
    pthread_mutex_t lock;
} msr_board_t;

/* The board of terminal fd (off when fd is not a terminal, or when active
 * is 0). */
void msr_board_init(msr_board_t *b, int fd, int active);

/* Erases what is shown and forgets the rows: those with text are left on
 * the screen as plain lines. */
void msr_board_cleanup(msr_board_t *b);

/* With the lock held (msr_board_lock): sets key's row to text (a new row
 * goes last); returns 0, or -1 when the board is full (the caller passes
 * the line through). */
int msr_board_set(msr_board_t *b, const void *key, const char *text, size_t len);

/* With the lock held: forgets key's row; 1 if it had one. */
int msr_board_remove(msr_board_t *b, const void *key);

/* Whether key has a row. */
int msr_board_has(const msr_board_t *b, const void *key);

/* With the lock held: appends to out what erases the rows shown (the
 * cursor then starts an empty line where the first row was). */
void msr_board_erase(msr_board_t *b, msr_buf_t *out);

/* With the lock held: appends to out the rows, each cut to the terminal's
 * width (so none wraps) and at most its height less one. */
void msr_board_draw(msr_board_t *b, msr_buf_t *out);

void msr_board_lock(msr_board_t *b);
void msr_board_unlock(msr_board_t *b);

/* Cuts text to at most cols display columns (a UTF-8 character is one
 * column; an escape sequence none); returns the bytes kept. Pure. */
size_t msr_board_fit(const char *text, size_t len, int cols);

#endif

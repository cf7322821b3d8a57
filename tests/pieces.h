/* One test executable from several files (test_coord, test_store_core,
 * the security tests): each file's table of tests is a piece, and main
 * runs every piece's tests as one table through the runner
 * (tests/runner.h), so the executable and its tests' names stay what they
 * were before the split. */
#ifndef MSR_TESTS_PIECES_H
#define MSR_TESTS_PIECES_H

#include <stddef.h>

#include "tests/runner.h"

typedef struct msr_test_piece {
    const msr_test_t *tests;
    size_t n;
} msr_test_piece_t;

/* The piece of a table defined in the same file. */
#define MSR_TEST_PIECE(table)                       \
    {                                               \
        (table), sizeof(table) / sizeof((table)[0]) \
    }

/* The most tests the pieces of one executable may hold together. */
#define MSR_TEST_PIECES_MAX 128

/* msr_test_main over the tests of pieces[0..n), in order; more than
 * MSR_TEST_PIECES_MAX fails the run. */
int msr_test_main_pieces(int argc, char **argv, const msr_test_piece_t *const *pieces, size_t n);

#endif

/* One test executable from several files' tables (pieces.h). */
#include "tests/pieces.h"

int msr_test_main_pieces(int argc, char **argv, const msr_test_piece_t *const *pieces, size_t n)
{
    static msr_test_t all[MSR_TEST_PIECES_MAX];
    size_t count = 0;
    for (size_t p = 0; p < n; p++)
        for (size_t k = 0; k < pieces[p]->n; k++) {
            MSR_CHECK_MSG(count < MSR_TEST_PIECES_MAX, "more than %d tests in the pieces",
                          MSR_TEST_PIECES_MAX);
            all[count++] = pieces[p]->tests[k];
        }
    return msr_test_main(argc, argv, all, count);
}

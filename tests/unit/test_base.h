/* The tests of test_base's other file (test_base_optparse.c) that its
 * table in test_base.c runs. */
#ifndef MSR_TESTS_TEST_BASE_H
#define MSR_TESTS_TEST_BASE_H

void test_optparse(void);
void test_optparse_boundaries(void);
void test_optparse_programs(void);

#endif

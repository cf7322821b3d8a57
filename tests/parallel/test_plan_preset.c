/* The planner's published shapes (planner/plan.h msr_plan_preset): each
 * preset counts, by the planner's own count, to its model's published
 * parameter number; an unknown name is refused and leaves *m alone. */
#include <string.h>

#include "planner/plan.h"
#include "tests/runner.h"

static void test_published_counts(void)
{
    /* the model cards' and papers' counts, written here apart from the
     * presets' own table */
    static const struct {
        const char *name;
        unsigned long long params;
    } want[] = {
        {"gpt2-124m", 124439808ull},    {"gpt2-350m", 354823168ull},
        {"gpt2-1.5b", 1557611200ull},   {"llama2-7b", 6738415616ull},
        {"llama2-13b", 13015864320ull}, {"llama2-70b", 68976648192ull},
        {"llama3-8b", 8030261248ull},   {"llama3-70b", 70553706496ull},
    };
    size_t n = 0;
    while (msr_plan_preset_name(n) != NULL)
        n++;
    MSR_CHECK_EQ(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++) {
        MSR_CHECK_STR(msr_plan_preset_name(i), want[i].name);
        msr_plan_model_t m;
        uint64_t published = 0;
        MSR_CHECK(msr_plan_preset(want[i].name, &m, &published) == 0);
        char why[256];
        MSR_CHECK_MSG(msr_plan_check_model(&m, why, sizeof why) == 0, "%s: %s", want[i].name, why);
        MSR_CHECK_MSG(msr_plan_num_params(&m) == want[i].params, "%s: %llu, want %llu",
                      want[i].name, (unsigned long long)msr_plan_num_params(&m), want[i].params);
        MSR_CHECK_EQ(published, want[i].params);
    }
}

static void test_unknown(void)
{
    msr_plan_model_t m;
    memset(&m, 0x5a, sizeof m);
    uint64_t p = 7;
    MSR_CHECK(msr_plan_preset("llama3-9b", &m, &p) == -1);
    MSR_CHECK(msr_plan_preset("", &m, &p) == -1);
    MSR_CHECK_EQ(p, 7);
    MSR_CHECK_EQ(m.layers, 0x5a5a5a5a);
    MSR_CHECK(msr_plan_preset("gpt2-124m", &m, NULL) == 0 && m.layers == 12);
}

static const msr_test_t tests[] = {
    {"published_counts", test_published_counts, 10},
    {"unknown", test_unknown, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}

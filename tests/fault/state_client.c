/* Writes a known set of store writes at a coordinator with a state file, and
 * counts what a coordinator resumed from that file holds.
 *
 *   state_client fill N   Sets k/<i> = v<i> for i < N, and Adds 1 to
 *                         "counter" after every Set whose i % 10 is 0, 3
 *                         or 6 (30 Adds for N = 100); each acknowledged
 *                         before the next is sent
 *   state_client count N  prints "keys K counter C": how many of k/<i>
 *                         (i < N) hold v<i>, and the counter (0 if absent)
 *
 * The coordinator is reached directly (MSR_COORDINATOR, MSR_TOKEN). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msrun/msrun.h"

static int fill(msr_ctx_t *ctx, long n)
{
    for (long i = 0; i < n; i++) {
        char key[64], value[64];
        snprintf(key, sizeof key, "k/%ld", i);
        snprintf(value, sizeof value, "v%ld", i);
        if (msr_store_set(ctx, key, value, strlen(value)) != MSR_OK) {
            fprintf(stderr, "state_client: Set %s: %s\n", key, msr_last_error());
            return 1;
        }
        if (i % 10 == 0 || i % 10 == 3 || i % 10 == 6) {
            if (msr_store_add(ctx, "counter", 1, NULL) != MSR_OK) {
                fprintf(stderr, "state_client: Add: %s\n", msr_last_error());
                return 1;
            }
        }
    }
    return 0;
}

static int count(msr_ctx_t *ctx, long n)
{
    long keys = 0;
    for (long i = 0; i < n; i++) {
        char key[64], want[64];
        snprintf(key, sizeof key, "k/%ld", i);
        snprintf(want, sizeof want, "v%ld", i);
        void *v = NULL;
        size_t len = 0;
        msr_status_t st = msr_store_get(ctx, key, 0, &v, &len);
        if (st == MSR_OK && len == strlen(want) && memcmp(v, want, len) == 0)
            keys++;
        else if (st != MSR_OK && st != MSR_ERR_NOT_FOUND) {
            fprintf(stderr, "state_client: Get %s: %s\n", key, msr_last_error());
            free(v);
            return 1;
        }
        free(v);
    }
    void *v = NULL;
    size_t len = 0;
    int64_t counter = 0;
    msr_status_t st = msr_store_get(ctx, "counter", 0, &v, &len);
    if (st == MSR_OK)
        counter = strtoll(v, NULL, 10);
    free(v);
    if (st != MSR_OK && st != MSR_ERR_NOT_FOUND) {
        fprintf(stderr, "state_client: Get counter: %s\n", msr_last_error());
        return 1;
    }
    printf("keys %ld counter %" PRId64 "\n", keys, counter);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "fill") != 0 && strcmp(argv[1], "count") != 0)) {
        fprintf(stderr, "usage: state_client fill|count N\n");
        return 2;
    }
    long n = atol(argv[2]);
    msr_ctx_t *ctx = NULL;
    if (msr_init(&ctx) != MSR_OK) {
        fprintf(stderr, "state_client: msr_init: %s\n", msr_last_error());
        return 1;
    }
    int rc = strcmp(argv[1], "fill") == 0 ? fill(ctx, n) : count(ctx, n);
    msr_finalize(ctx);
    return rc;
}

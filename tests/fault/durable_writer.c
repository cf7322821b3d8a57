/* Streams store writes at a coordinator that a test keeps killing, and
 * records every write the coordinator acknowledged; then checks that a
 * recovered coordinator has them all.
 *
 *   durable_writer write DIR   until DIR/stop exists: one thread Sets
 *                              k/<i> = v<i>, another Adds 1 to "counter";
 *                              acknowledged writes go to DIR/sets, DIR/adds
 *                              (one line each, written after the answer),
 *                              failed ones (outcome unknown) as "? ..."
 *   durable_writer check DIR   every acknowledged Set is there, and the
 *                              counter equals the acknowledged Adds (each
 *                              applied once; a failed one may count or not)
 *
 * The coordinator is reached directly (MSR_COORDINATOR, MSR_TOKEN). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "msrun/msrun.h"

static const char *dir;

static int stopped(void)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/stop", dir);
    return access(p, F_OK) == 0;
}

static int open_log(const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "durable_writer: cannot open %s: %s\n", p, strerror(errno));
        exit(1);
    }
    return fd;
}

static void log_line(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void log_line(int fd, const char *fmt, ...)
{
    char line[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (write(fd, line, (size_t)n) != n)
        exit(1);
}

static void *setter(void *arg)
{
    msr_ctx_t *ctx = arg;
    int fd = open_log("sets");
    for (long i = 0; !stopped(); i++) {
        char key[64], value[64];
        snprintf(key, sizeof key, "k/%ld", i);
        snprintf(value, sizeof value, "v%ld", i);
        if (msr_store_set(ctx, key, value, strlen(value)) == MSR_OK)
            log_line(fd, "%ld\n", i);
        else
            log_line(fd, "? %ld %s\n", i, msr_last_error());
    }
    close(fd);
    return NULL;
}

static void *adder(void *arg)
{
    msr_ctx_t *ctx = arg;
    int fd = open_log("adds");
    while (!stopped()) {
        int64_t v = 0;
        if (msr_store_add(ctx, "counter", 1, &v) == MSR_OK)
            log_line(fd, "%" PRId64 "\n", v);
        else
            log_line(fd, "? %s\n", msr_last_error());
    }
    close(fd);
    return NULL;
}

static FILE *open_read(const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    if (f == NULL) {
        fprintf(stderr, "durable_writer: cannot read %s: %s\n", p, strerror(errno));
        exit(1);
    }
    return f;
}

static int check(msr_ctx_t *ctx)
{
    int bad = 0;
    long nsets = 0, nunknown = 0;
    char line[600];
    FILE *f = open_read("sets");
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '?') {
            nunknown++;
            continue;
        }
        long i = atol(line);
        char key[64], want[64];
        snprintf(key, sizeof key, "k/%ld", i);
        snprintf(want, sizeof want, "v%ld", i);
        void *v = NULL;
        size_t len = 0;
        msr_status_t st = msr_store_get(ctx, key, 0, &v, &len);
        if (st != MSR_OK || len != strlen(want) || memcmp(v, want, len) != 0) {
            if (bad < 10)
                fprintf(stderr, "durable_writer: acknowledged Set of %s is lost (%s)\n", key,
                        st == MSR_OK ? "another value" : msr_status_str(st));
            bad++;
        }
        free(v);
        nsets++;
    }
    fclose(f);
    long nadds = 0, nfailed = 0;
    int64_t max = 0;
    char *seen = calloc(1 << 24, 1);
    f = open_read("adds");
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '?') {
            nfailed++;
            continue;
        }
        int64_t v = strtoll(line, NULL, 10);
        if (v > 0 && v < (1 << 24) && seen) {
            if (seen[v]) {
                if (bad < 10)
                    fprintf(stderr,
                            "durable_writer: two acknowledged Adds returned %" PRId64
                            " (an acknowledged Add was lost and the count went back)\n",
                            v);
                bad++;
            }
            seen[v] = 1;
        }
        if (v > max)
            max = v;
        nadds++;
    }
    fclose(f);
    free(seen);
    void *v = NULL;
    size_t len = 0;
    int64_t counter = 0;
    if (msr_store_get(ctx, "counter", 0, &v, &len) == MSR_OK)
        counter = strtoll(v, NULL, 10);
    free(v);
    if (counter < nadds || counter > nadds + nfailed) {
        fprintf(stderr,
                "durable_writer: the counter is %" PRId64 " after %ld acknowledged Adds (%ld "
                "failed)%s\n",
                counter, nadds, nfailed,
                counter < nadds ? ": acknowledged Adds were lost" : ": an Add was applied twice");
        bad++;
    }
    printf("checked %ld acknowledged Sets (%ld failed) and %ld acknowledged Adds (%ld failed; "
           "counter %" PRId64 ", highest answer %" PRId64 "): %d lost or doubled\n",
           nsets, nunknown, nadds, nfailed, counter, max, bad);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "write") != 0 && strcmp(argv[1], "check") != 0)) {
        fprintf(stderr, "usage: durable_writer write|check DIR\n");
        return 2;
    }
    dir = argv[2];
    msr_ctx_t *a = NULL, *b = NULL;
    if (msr_init(&a) != MSR_OK || msr_init(&b) != MSR_OK) {
        fprintf(stderr, "durable_writer: msr_init: %s\n", msr_last_error());
        return 1;
    }
    int rc = 0;
    if (strcmp(argv[1], "check") == 0) {
        rc = check(a);
    } else {
        pthread_t t1, t2;
        if (pthread_create(&t1, NULL, setter, a) != 0 || pthread_create(&t2, NULL, adder, b) != 0)
            return 1;
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
    }
    msr_finalize(a);
    msr_finalize(b);
    return rc;
}

/* A worker for the integration tests, linked against libmsrun like a user's
 * program. The first argument picks what it does:
 *   env               print the msrun and torch variables, one per line
 *   store             exercise the store's semantics across all ranks
 *   barrier           msr_init, one barrier, msr_finalize
 *   token             use a wrong job token and expect a refusal
 *   exit CODE [RANK]  exit with CODE (only RANK, if given; others wait)
 *   output N          write N lines to stdout and to stderr
 *   sleep SECONDS     say "ready" and sleep (for signal tests)
 * Any failed check prints "CHECK FAILED ..." to stderr and exits 1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "msrun/msrun.h"

#define CHECK(cond, ...)                                                             \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "CHECK FAILED (%s:%d) %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, " [last error: %s]\n", msr_last_error());                \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define CHECK_ST(expr, want)                                             \
    do {                                                                 \
        msr_status_t st_ = (expr);                                       \
        CHECK(st_ == (want), "%s gave %s", #expr, msr_status_name(st_)); \
    } while (0)

static void sleep_ms(int ms)
{
    usleep((useconds_t)ms * 1000);
}

static int do_env(void)
{
    static const char *const names[] = {
        "MSR_RANK",
        "MSR_WORLD_SIZE",
        "MSR_LOCAL_RANK",
        "MSR_LOCAL_WORLD_SIZE",
        "MSR_NODE_RANK",
        "MSR_NODE_COUNT",
        "MSR_GENERATION",
        "MSR_JOB_ID",
        "MSR_COORDINATOR",
        "MSR_AGENT",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "OMP_NUM_THREADS",
        "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RUN_ID",
    };
    const char *rank = getenv("MSR_RANK");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        printf("ENV %s %s=%s\n", rank ? rank : "?", names[i], v ? v : "(unset)");
    }
    printf("ENV %s MSR_TOKEN_SET=%d\n", rank ? rank : "?", getenv("MSR_TOKEN") != NULL);
    msr_ctx_t *ctx = NULL;
    CHECK_ST(msr_init(&ctx), MSR_OK);
    printf("CTX %d rank=%d world=%d local=%d/%d node=%d/%d gen=%d job=%s\n", msr_rank(ctx),
           msr_rank(ctx), msr_world_size(ctx), msr_local_rank(ctx), msr_local_world_size(ctx),
           msr_node_rank(ctx), msr_node_count(ctx), msr_generation(ctx), msr_job_id(ctx));
    msr_finalize(ctx);
    return 0;
}

static int do_store(void)
{
    msr_ctx_t *ctx = NULL;
    CHECK_ST(msr_init(&ctx), MSR_OK);
    int rank = msr_rank(ctx), world = msr_world_size(ctx);
    void *v = NULL;
    size_t len = 0;

    /* 1. a waiting get is answered when the key is set */
    if (rank == 0) {
        sleep_ms(200);
        CHECK_ST(msr_store_set(ctx, "wk", "ready", 5), MSR_OK);
    }
    CHECK_ST(msr_store_get(ctx, "wk", 20000, &v, &len), MSR_OK);
    CHECK(len == 5 && memcmp(v, "ready", 5) == 0, "got %zu bytes", len);
    free(v);

    /* 2. add under contention from every rank */
    for (int i = 0; i < 50; i++)
        CHECK_ST(msr_store_add(ctx, "ctr", 1, NULL), MSR_OK);
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    int64_t total = -1;
    CHECK_ST(msr_store_add(ctx, "ctr", 0, &total), MSR_OK);
    CHECK(total == 50LL * world, "counter is %lld, want %lld", (long long)total, 50LL * world);

    /* 3. compare-set: exactly one rank wins the lock */
    char me[32];
    snprintf(me, sizeof me, "rank %d", rank);
    int swapped = -1;
    CHECK_ST(msr_store_compare_set(ctx, "lock", NULL, 0, me, strlen(me), &swapped), MSR_OK);
    if (swapped)
        CHECK_ST(msr_store_add(ctx, "winners", 1, NULL), MSR_OK);
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    CHECK_ST(msr_store_get(ctx, "winners", 0, &v, &len), MSR_OK);
    CHECK(len == 1 && ((char *)v)[0] == '1', "winners = %.*s", (int)len, (char *)v);
    free(v);
    CHECK_ST(msr_store_get(ctx, "lock", 0, &v, &len), MSR_OK);
    CHECK(strncmp(v, "rank ", 5) == 0, "lock holds '%s'", (char *)v);
    free(v);

    /* 4. allgather keeps rank order and lengths */
    char data[64];
    memset(data, 'a' + rank % 26, sizeof data);
    msr_gather_result_t *g = NULL;
    CHECK_ST(msr_store_allgather(ctx, "order", (uint32_t)world, (uint32_t)rank,
                                 (uint32_t)msr_local_world_size(ctx), data, (size_t)rank + 1, -1,
                                 &g),
             MSR_OK);
    CHECK(g->count == (uint32_t)world, "count %u", g->count);
    for (int r = 0; r < world; r++) {
        CHECK(g->lengths[r] == (size_t)r + 1, "length of %d is %zu", r, g->lengths[r]);
        for (int j = 0; j <= r; j++)
            CHECK(g->data[g->offsets[r] + (size_t)j] == 'a' + r % 26, "byte %d of %d", j, r);
    }
    msr_gather_result_free(g);
    /* equal-size allgather of every rank */
    int *all = calloc((size_t)(world > 0 ? world : 1), sizeof *all);
    CHECK_ST(msr_allgather(ctx, &rank, sizeof rank, all), MSR_OK);
    for (int r = 0; r < world; r++)
        CHECK(all[r] == r, "all[%d] = %d", r, all[r]);
    free(all);

    /* 5. absent keys, deadlines, bad keys */
    CHECK_ST(msr_store_get(ctx, "absent", 0, &v, &len), MSR_ERR_NOT_FOUND);
    CHECK_ST(msr_store_get(ctx, "absent", 100, &v, &len), MSR_ERR_TIMEOUT);
    CHECK(strstr(msr_last_error(), "absent") != NULL, "message: %s", msr_last_error());
    CHECK_ST(msr_store_set(ctx, "", "x", 1), MSR_ERR_BAD_KEY);
    CHECK_ST(msr_store_set(ctx, "bad\nkey", "x", 1), MSR_ERR_BAD_KEY);
    CHECK(strstr(msr_last_error(), "bad key") != NULL, "message: %s", msr_last_error());
    CHECK_ST(msr_store_add(ctx, "wk", 1, NULL), MSR_ERR_INVALID_ARG); /* not a counter */

    /* 6. delete, and the key count through the node's msrun: wk, ctr,
     * lock and winners (barriers and allgathers are no keys) */
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    uint64_t keys = 0;
    CHECK_ST(msr_store_num_keys(ctx, &keys), MSR_OK);
    CHECK(keys == 4, "num_keys %llu, want 4", (unsigned long long)keys);
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    if (rank == 0) {
        int existed = 0;
        CHECK_ST(msr_store_delete(ctx, "wk", &existed), MSR_OK);
        CHECK(existed, "wk did not exist");
    }
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    CHECK_ST(msr_store_get(ctx, "wk", 0, &v, &len), MSR_ERR_NOT_FOUND);
    CHECK_ST(msr_store_num_keys(ctx, &keys), MSR_OK);
    CHECK(keys == 3, "num_keys %llu after a delete, want 3", (unsigned long long)keys);

    /* 7. a store from another generation is refused */
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    printf("store checks passed on rank %d of %d\n", rank, world);
    msr_finalize(ctx);
    return 0;
}

static msr_status_t do_ckpt_reader(msr_ctx_t *ctx, const char *dir);
static msr_status_t do_ckpt_reader_crc(msr_ctx_t *ctx, const char *dir);

/* Checkpoints: save steps 0..5 keeping 3, lose rank 1's last commit,
 * agree on the step before, detect a corrupt file. */
static int do_ckpt(const char *dir)
{
    msr_ctx_t *ctx = NULL;
    CHECK_ST(msr_init(&ctx), MSR_OK);
    int rank = msr_rank(ctx);
    char data[4096];
    int64_t latest = 99;
    CHECK_ST(msr_ckpt_latest(ctx, dir, &latest), MSR_OK);
    CHECK(latest == -1, "latest of an empty dir is %lld", (long long)latest);
    for (int step = 0; step <= 5; step++) {
        size_t len = (size_t)(100 * rank + step * 7 + 1);
        for (size_t i = 0; i < len; i++)
            data[i] = (char)(rank * 31 + step * 7 + (int)i);
        CHECK_ST(msr_ckpt_save(ctx, dir, step, data, len, 3), MSR_OK);
    }
    CHECK_ST(msr_ckpt_latest(ctx, dir, &latest), MSR_OK);
    CHECK(latest == 5, "latest is %lld, want 5", (long long)latest);
    void *got = NULL;
    size_t len = 0;
    CHECK_ST(msr_ckpt_load(ctx, dir, 5, &got, &len), MSR_OK);
    CHECK(len == (size_t)(100 * rank + 36), "length %zu", len);
    for (size_t i = 0; i < len; i++)
        CHECK(((char *)got)[i] == (char)(rank * 31 + 35 + (int)i), "byte %zu", i);
    free(got);
    CHECK_ST(msr_ckpt_load(ctx, dir, 1, &got, &len), MSR_ERR_NOT_FOUND); /* pruned */
    /* rank 1 "crashed" before committing step 5: the job agrees on 4 */
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    if (rank == 1) {
        char path[4096];
        snprintf(path, sizeof path, "%s/step-5/rank-1.commit", dir);
        CHECK(unlink(path) == 0, "unlink %s", path);
    }
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    CHECK_ST(msr_ckpt_latest(ctx, dir, &latest), MSR_OK);
    CHECK(latest == 4, "latest is %lld, want 4", (long long)latest);
    /* a flipped byte is found by the CRC */
    if (rank == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/step-4/rank-0.bin", dir);
        FILE *f = fopen(path, "r+b");
        CHECK(f != NULL, "open %s", path);
        fseek(f, 60, SEEK_SET);
        int c = fgetc(f);
        fseek(f, 60, SEEK_SET);
        fputc(c ^ 0x40, f);
        fclose(f);
        CHECK_ST(msr_ckpt_load(ctx, dir, 4, &got, &len), MSR_ERR_CORRUPT);
    } else {
        CHECK_ST(msr_ckpt_load(ctx, dir, 4, &got, &len), MSR_OK);
        free(got);
    }
    /* across world sizes: the newest step with a MANIFEST, and any rank's
     * state of it */
    int saved_world = 0;
    CHECK_ST(msr_ckpt_latest_any(ctx, dir, &latest, &saved_world), MSR_OK);
    CHECK(latest == 5 && saved_world == msr_world_size(ctx), "latest_any %lld of world %d",
          (long long)latest, saved_world);
    CHECK_ST(msr_ckpt_load_rank(ctx, dir, 5, 2, &got, &len), MSR_OK);
    CHECK(len == 236 && ((char *)got)[0] == (char)(2 * 31 + 35), "rank 2's state");
    free(got);
    CHECK_ST(msr_ckpt_load_rank(ctx, dir, 5, 9, &got, &len), MSR_ERR_NOT_FOUND);
    /* part of a state (msr_ckpt_read_rank): up to exactly its end, not one
     * byte past it */
    {
        unsigned char part[236];
        uint64_t total = 0;
        CHECK_ST(msr_ckpt_read_rank(ctx, dir, 5, 2, 0, part, 1, &total), MSR_OK);
        CHECK(total == 236 && part[0] == (unsigned char)(2 * 31 + 35), "rank 2's first byte");
        CHECK_ST(msr_ckpt_read_rank(ctx, dir, 5, 2, 200, part, 36, NULL), MSR_OK);
        CHECK_ST(msr_ckpt_read_rank(ctx, dir, 5, 2, 236, part, 0, NULL), MSR_OK);
        CHECK_ST(msr_ckpt_read_rank(ctx, dir, 5, 2, 200, part, 37, NULL), MSR_ERR_CORRUPT);
        CHECK_ST(msr_ckpt_read_rank(ctx, dir, 5, 2, 237, part, 0, NULL), MSR_ERR_CORRUPT);
        CHECK_ST(msr_ckpt_read_rank(ctx, dir, 5, 9, 0, part, 1, NULL), MSR_ERR_NOT_FOUND);
    }
    CHECK_ST(do_ckpt_reader(ctx, dir), MSR_OK);
    CHECK_ST(do_ckpt_reader_crc(ctx, dir), MSR_OK);
    printf("checkpoint checks passed on rank %d\n", rank);
    msr_finalize(ctx);
    return 0;
}

/* A reader held open (msr_ckpt_reader_*): reads in order that reach the
 * state's end check its CRC, exactly to the end and not one byte past;
 * a read that skips bytes checks nothing; rank 0's step 4, damaged above,
 * fails at the read that reaches its end, and only with check. */
static msr_status_t do_ckpt_reader(msr_ctx_t *ctx, const char *dir)
{
    unsigned char part[236], *all;
    uint64_t total = 0;
    msr_ckpt_reader_t *rd = NULL;
    CHECK_ST(msr_ckpt_reader_open(ctx, dir, 5, 2, 1, &rd, &total), MSR_OK);
    CHECK(total == 236, "rank 2's state holds %llu bytes", (unsigned long long)total);
    CHECK_ST(msr_ckpt_reader_read(rd, 0, part, 100), MSR_OK);
    CHECK(!msr_ckpt_reader_checked(rd), "checked before its end");
    CHECK_ST(msr_ckpt_reader_read(rd, 50, part + 50, 186), MSR_OK); /* overlapping, to the end */
    CHECK(msr_ckpt_reader_checked(rd), "read whole in order, not checked");
    CHECK(part[0] == (unsigned char)(2 * 31 + 35), "rank 2's first byte through a reader");
    CHECK_ST(msr_ckpt_reader_read(rd, 236, part, 0), MSR_OK);
    CHECK_ST(msr_ckpt_reader_read(rd, 236, part, 1), MSR_ERR_CORRUPT);
    CHECK_ST(msr_ckpt_reader_read(rd, 237, part, 0), MSR_ERR_CORRUPT);
    msr_ckpt_reader_close(rd);
    CHECK_ST(msr_ckpt_reader_open(ctx, dir, 5, 2, 1, &rd, NULL), MSR_OK);
    CHECK_ST(msr_ckpt_reader_read(rd, 0, part, 10), MSR_OK);
    CHECK_ST(msr_ckpt_reader_read(rd, 11, part + 11, 225), MSR_OK); /* byte 10 skipped */
    CHECK(!msr_ckpt_reader_checked(rd), "checked with a byte skipped");
    msr_ckpt_reader_close(rd);
    msr_ckpt_reader_close(NULL);
    CHECK_ST(msr_ckpt_reader_open(ctx, dir, 5, 9, 1, &rd, NULL), MSR_ERR_NOT_FOUND);
    CHECK_ST(msr_barrier(ctx), MSR_OK); /* rank 0 damaged step 4 before it */
    for (int check = 0; check < 2; check++) {
        CHECK_ST(msr_ckpt_reader_open(ctx, dir, 4, 0, check, &rd, &total), MSR_OK);
        CHECK(total > 1 && (all = malloc(total)) != NULL, "a buffer of %llu bytes",
              (unsigned long long)total);
        CHECK_ST(msr_ckpt_reader_read(rd, 0, all, total - 1), MSR_OK);
        CHECK_ST(msr_ckpt_reader_read(rd, total - 1, all, 1), check ? MSR_ERR_CORRUPT : MSR_OK);
        CHECK(!check || strstr(msr_last_error(), "step-4/rank-0.bin does not match its CRC"),
              "the damage not named: %s", msr_last_error());
        free(all);
        msr_ckpt_reader_close(rd);
    }
    return MSR_OK;
}

/* CRC-32 (IEEE 802.3, zlib's) a bit at a time, from its definition: the
 * reference msr_ckpt_reader_read_crc's CRCs are checked against. */
static uint32_t ref_crc32(const unsigned char *p, size_t len)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}

/* msr_ckpt_reader_read_crc: each read gives its bytes' CRC, and the
 * reader's whole check, continued from those CRCs, still checks the state
 * exactly at its end (reads in order, overlapping, of one byte), and
 * refuses rank 0's damaged step 4 at the read that reaches its end (the
 * CRC then not written). */
static msr_status_t do_ckpt_reader_crc(msr_ctx_t *ctx, const char *dir)
{
    /* [0, cut[0]), then [cut[1], 236): following, the last byte alone,
     * overlapping, all in the second */
    static const size_t cuts[][2] = {{100, 100}, {235, 235}, {100, 50}, {0, 0}};
    unsigned char part[236], *all;
    uint64_t total = 0;
    uint32_t crc;
    msr_ckpt_reader_t *rd = NULL;
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        size_t a = cuts[k][0], b = cuts[k][1];
        CHECK_ST(msr_ckpt_reader_open(ctx, dir, 5, 2, 1, &rd, &total), MSR_OK);
        CHECK_ST(msr_ckpt_reader_read_crc(rd, 0, part, a, &crc), MSR_OK);
        CHECK(crc == ref_crc32(part, a), "the CRC of [0, %zu)", a);
        CHECK(!msr_ckpt_reader_checked(rd), "checked before its end");
        CHECK_ST(msr_ckpt_reader_read_crc(rd, b, part + b, 236 - b, &crc), MSR_OK);
        CHECK(crc == ref_crc32(part + b, 236 - b), "the CRC of [%zu, 236)", b);
        CHECK(msr_ckpt_reader_checked(rd), "read whole in order with CRCs, not checked (%zu)", a);
        msr_ckpt_reader_close(rd);
    }
    CHECK_ST(msr_ckpt_reader_open(ctx, dir, 4, 0, 1, &rd, &total), MSR_OK);
    CHECK(total > 1 && (all = malloc(total)) != NULL, "a buffer of %llu bytes",
          (unsigned long long)total);
    CHECK_ST(msr_ckpt_reader_read_crc(rd, 0, all, total - 1, &crc), MSR_OK);
    CHECK(crc == ref_crc32(all, total - 1), "the CRC of step 4's state but its last byte");
    crc = 7;
    CHECK_ST(msr_ckpt_reader_read_crc(rd, total - 1, all, 1, &crc), MSR_ERR_CORRUPT);
    CHECK(crc == 7 && strstr(msr_last_error(), "step-4/rank-0.bin does not match its CRC"),
          "the damage not named, or the CRC written: %s", msr_last_error());
    free(all);
    msr_ckpt_reader_close(rd);
    return MSR_OK;
}

/* Checkpoint agreement reads every rank's offer, the last rank's too: save
 * steps 0..2, the last rank loses its commit of step 2 (the job agrees on
 * 1), then rank 0 loses its commit of step 1 (the job agrees on 0). */
static int do_ckpt_last(const char *dir)
{
    msr_ctx_t *ctx = NULL;
    CHECK_ST(msr_init(&ctx), MSR_OK);
    int rank = msr_rank(ctx), last = msr_world_size(ctx) - 1;
    char data[64], path[4096];
    int64_t latest = -1;
    memset(data, 'a' + rank, sizeof data);
    for (int step = 0; step <= 2; step++)
        CHECK_ST(msr_ckpt_save(ctx, dir, step, data, sizeof data, 3), MSR_OK);
    CHECK_ST(msr_ckpt_latest(ctx, dir, &latest), MSR_OK);
    CHECK(latest == 2, "latest is %lld, want 2", (long long)latest);
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    if (rank == last) {
        snprintf(path, sizeof path, "%s/step-2/rank-%d.commit", dir, last);
        CHECK(unlink(path) == 0, "unlink %s", path);
    }
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    CHECK_ST(msr_ckpt_latest(ctx, dir, &latest), MSR_OK);
    CHECK(latest == 1, "without rank %d's commit of step 2, latest is %lld, want 1", last,
          (long long)latest);
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/step-1/rank-0.commit", dir);
        CHECK(unlink(path) == 0, "unlink %s", path);
    }
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    CHECK_ST(msr_ckpt_latest(ctx, dir, &latest), MSR_OK);
    CHECK(latest == 0, "without rank 0's commit of step 1, latest is %lld, want 0",
          (long long)latest);
    printf("last-rank checkpoint checks passed on rank %d\n", rank);
    msr_finalize(ctx);
    return 0;
}

/* Checkpoints across world sizes: saves steps FIRST..LAST keeping 3 (the
 * test runs it at one world size, then at another, and counts the steps
 * left). */
static int do_ckpt_steps(const char *dir, int first, int last)
{
    msr_ctx_t *ctx = NULL;
    CHECK_ST(msr_init(&ctx), MSR_OK);
    int rank = msr_rank(ctx);
    char data[64];
    memset(data, 'a' + rank, sizeof data);
    for (int step = first; step <= last; step++)
        CHECK_ST(msr_ckpt_save(ctx, dir, step, data, sizeof data, 3), MSR_OK);
    /* every rank's pruning is done before any checks what is left */
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    printf("saved steps %d..%d on rank %d\n", first, last, rank);
    msr_finalize(ctx);
    return 0;
}

/* Hang detection: rank `who` stops its own process (how == "stop"; with
 * "stop_at_init" as soon as msr_init returns) or stops calling
 * msr_heartbeat() (how == "stall"); the others beat for 20 s. */
static int do_hang(const char *how, int who)
{
    msr_ctx_t *ctx = NULL;
    CHECK_ST(msr_init(&ctx), MSR_OK);
    int rank = msr_rank(ctx);
    if (rank == who && strcmp(how, "stop_at_init") == 0)
        raise(SIGSTOP);
    printf("rank %d ready\n", rank);
    for (int i = 0; i < 200; i++) {
        if (rank == who && i == 5) {
            if (strcmp(how, "stop") == 0)
                raise(SIGSTOP);
            else
                sleep(60); /* no more msr_heartbeat() */
        }
        msr_heartbeat(ctx);
        sleep_ms(100);
    }
    msr_finalize(ctx);
    return 0;
}

static int do_barrier(void)
{
    msr_ctx_t *ctx = NULL;
    CHECK_ST(msr_init(&ctx), MSR_OK);
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    msr_finalize(ctx);
    return 0;
}

static int do_token(void)
{
    setenv("MSR_TOKEN", "not-the-token", 1);
    unsetenv("MSR_AGENT"); /* talk to the coordinator itself */
    msr_ctx_t *ctx = NULL;
    CHECK_ST(msr_init(&ctx), MSR_OK);
    CHECK_ST(msr_store_set(ctx, "k", "v", 1), MSR_ERR_PERMISSION);
    printf("refused: %s\n", msr_last_error());
    uint64_t keys = 0;
    CHECK_ST(msr_store_num_keys(ctx, &keys), MSR_ERR_PERMISSION);
    printf("num_keys refused: %s\n", msr_last_error());
    msr_finalize(ctx);
    return 0;
}

/* Huge counts through the node's msrun: a local_count beyond the node's
 * workers and a count beyond the job's ranks are refused at once (the
 * proxy used to reserve 16 bytes per local participant and then wait). */
static int do_counts(void)
{
    msr_ctx_t *ctx = NULL;
    CHECK_ST(msr_init(&ctx), MSR_OK);
    CHECK_ST(msr_store_barrier(ctx, "huge-local", 200000000, 100000000, 2000), MSR_ERR_INVALID_ARG);
    printf("refused: %s\n", msr_last_error());
    msr_gather_result_t *r = NULL;
    CHECK_ST(msr_store_allgather(ctx, "huge-local", 200000000, 0, 100000000, "x", 1, 2000, &r),
             MSR_ERR_INVALID_ARG);
    CHECK_ST(msr_store_allgather(ctx, "huge", 1u << 24, 0, 0, "x", 1, 2000, &r),
             MSR_ERR_INVALID_ARG);
    printf("refused: %s\n", msr_last_error());
    CHECK_ST(msr_barrier(ctx), MSR_OK);
    msr_finalize(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "env") == 0)
        return do_env();
    if (strcmp(mode, "store") == 0)
        return do_store();
    if (strcmp(mode, "barrier") == 0)
        return do_barrier();
    if (strcmp(mode, "hang") == 0 && argc > 3)
        return do_hang(argv[2], atoi(argv[3]));
    if (strcmp(mode, "ckpt") == 0 && argc > 2)
        return do_ckpt(argv[2]);
    if (strcmp(mode, "ckpt_last") == 0 && argc > 2)
        return do_ckpt_last(argv[2]);
    if (strcmp(mode, "ckpt_steps") == 0 && argc > 4)
        return do_ckpt_steps(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (strcmp(mode, "token") == 0)
        return do_token();
    if (strcmp(mode, "counts") == 0)
        return do_counts();
    if (strcmp(mode, "exit") == 0 && argc > 2) {
        const char *rank = getenv("MSR_RANK");
        if (argc > 3 && (rank == NULL || strcmp(rank, argv[3]) != 0)) {
            sleep(30); /* stopped by msrun when the failing rank exits */
            return 0;
        }
        fprintf(stderr, "rank %s is about to exit with %s\n", rank ? rank : "?", argv[2]);
        fprintf(stderr, "last words of rank %s\n", rank ? rank : "?");
        if (strncmp(argv[2], "SIG", 3) == 0) {
            int sig = strcmp(argv[2], "SIGKILL") == 0   ? SIGKILL
                      : strcmp(argv[2], "SIGSEGV") == 0 ? SIGSEGV
                                                        : SIGTERM;
            signal(sig, SIG_DFL);
            raise(sig);
        }
        return atoi(argv[2]);
    }
    if (strcmp(mode, "output") == 0 && argc > 2) {
        int n = atoi(argv[2]);
        for (int i = 0; i < n; i++) {
            printf("out line %d of rank %s\n", i, getenv("MSR_RANK"));
            fprintf(stderr, "err line %d of rank %s\n", i, getenv("MSR_RANK"));
        }
        printf("no newline at the end");
        return 0;
    }
    if (strcmp(mode, "sleep") == 0 && argc > 2) {
        printf("ready\n");
        sleep((unsigned)atoi(argv[2]));
        return 0;
    }
    fprintf(stderr,
            "usage: it_worker env|store|barrier|token|counts|exit CODE [RANK]|output N|sleep S\n");
    return 2;
}

/* The records persist.c writes (to a state file's log, or etcd's frames):
 * their contents, the log's compaction and its bound, a torn tail or
 * frame, the file's descriptor, counts and symlinks. */
#include <errno.h>
#include <fcntl.h>
#include <grpc/status.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/status.h"
#include "cluster/coord_internal.h"
#include "tests/unit_rdzv/test_coord.h"

/* ---- the records persist.c hands etcd ---- */

/* A coordinator without a state file, for records applied by hand. */
static msr_coord_t *plain_coord(const char *job_id)
{
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = job_id,
                              .worker_num = 1,
                              .local_worker_num = 1,
                              .max_restarts = 0,
                              .node_timeout_ms = 60000,
                              .join_timeout_ms = 60000};
    tc_job_max_restarts = 0;
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    return co;
}

/* ps packed in etcd's frame (length, CRC of the payload), as persist.c
 * frames it; malloc'd. */
static uint8_t *etcd_frame(const ProtobufCMessage *msg, size_t *len_p)
{
    size_t plen = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(8 + plen);
    MSR_CHECK(buf != NULL);
    protobuf_c_message_pack(msg, buf + 8);
    uint32_t crc = msr_crc32(0, buf + 8, plen);
    for (int i = 0; i < 4; i++) {
        buf[i] = (uint8_t)(plen >> (8 * i));
        buf[4 + i] = (uint8_t)(crc >> (8 * i));
    }
    *len_p = 8 + plen;
    return buf;
}

/* The records of etcd's store: the snapshot and the change that a
 * coordinator writes read back whole into another, with the answers it
 * remembers (a retry is answered from them), and a change of another job
 * refused. */
static void test_persist_records(void)
{
    msr_coord_t *a = plain_coord("job");
    tc_join(a, 0, 1, 1, 0);
    MSR_CHECK_EQ(tc_add_req(a, "n", 5, 7, 1), 5);
    size_t len = 0;
    uint8_t *rec = msr_coord_persist_snapshot_record(a, &len);
    MSR_CHECK(rec != NULL);
    msr_coord_t *b = plain_coord("job");
    MSR_CHECK_EQ(msr_coord_persist_apply(b, rec, len, 1), MSR_OK);
    MSR_CHECK(strcmp(tc_get_key(b, "n"), "5") == 0);
    MSR_CHECK_EQ(tc_add_req(b, "n", 5, 7, 1), 5); /* the retry: the saved answer */
    MSR_CHECK(strcmp(tc_get_key(b, "n"), "5") == 0);
    /* a request of each method is taken; one past the last is not */
    Msr__PersistedState *ps = msr__persisted_state__unpack(NULL, len - 8, rec + 8);
    MSR_CHECK(ps != NULL && ps->n_requests == 1);
    for (uint32_t m = MSR_RPC_METHOD_COUNT - 1; ps != NULL && m <= MSR_RPC_METHOD_COUNT; m++) {
        ps->requests[0]->method = m;
        size_t flen = 0;
        uint8_t *f = etcd_frame(&ps->base, &flen);
        msr_coord_t *d = plain_coord("job");
        msr_status_t st = msr_coord_persist_apply(d, f, flen, 1);
        MSR_CHECK_MSG(m < MSR_RPC_METHOD_COUNT ? st == MSR_OK : st == MSR_ERR_CORRUPT,
                      "a saved request of method %u: %s", m, msr_status_str(st));
        msr_coord_destroy(d);
        free(f);
    }
    /* a node's count of its machine's ranks: up to the job's ranks (1) */
    for (int32_t k = -1; ps != NULL && k <= 2; k++) {
        MSR_CHECK_EQ(ps->n_nodes, 1);
        ps->requests[0]->method = MSR_RPC_ADD;
        ps->nodes[0]->machine_ranks = k;
        size_t flen = 0;
        uint8_t *f = etcd_frame(&ps->base, &flen);
        msr_coord_t *d = plain_coord("job");
        msr_status_t st = msr_coord_persist_apply(d, f, flen, 1);
        MSR_CHECK_MSG(k >= 0 && k <= 1 ? st == MSR_OK : st == MSR_ERR_CORRUPT,
                      "a saved node with %d ranks on its machine: %s", k, msr_status_str(st));
        msr_coord_destroy(d);
        free(f);
    }
    msr__persisted_state__free_unpacked(ps, NULL);
    msr_free(rec);
    /* another job's change is refused whole */
    msr_coord_t *other = plain_coord("other");
    tcall_t c = {0};
    Msr__JoinRequest j = tc_join_req(1, 1, 0, 0);
    j.job_id = "other";
    tc_call(other, &c, MSR_RPC_JOIN, &j.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "join: %d %s", c.code, c.message);
    msr_tcall_reset(&c);
    rec = msr_coord_persist_change_record(other, &len);
    MSR_CHECK(rec != NULL);
    MSR_CHECK_EQ(msr_coord_persist_apply(b, rec, len, 0), MSR_ERR_CORRUPT);
    msr_free(rec);
    msr_coord_destroy(other);
    msr_coord_destroy(b);
    msr_coord_destroy(a);
}

/* Saving appends what changed; the log is compacted into a new snapshot as
 * it grows; reading it back replays it. */
static void test_log_and_compaction(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    msr_coord_t *co = tc_durable_coord(t.path);
    tcall_t c = {0};
    char big[4000];
    memset(big, 'b', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; i < 200; i++) {
        char k[32];
        snprintf(k, sizeof k, "big%d", i);
        MSR_CHECK_EQ(tc_set_key(co, &c, k, big), 0);
    }
    long with_big = tc_file_size(t.path);
    /* one small change costs a small record, not the 800 KB stored */
    long long w0 = tc_bytes_written();
    MSR_CHECK_EQ(tc_set_key(co, &c, "small", "1"), 0);
    long long wrote = tc_bytes_written() - w0;
    long grew = tc_file_size(t.path) - with_big;
    MSR_CHECK_MSG(grew > 0 && grew < 200, "one small Set appended %ld bytes", grew);
    MSR_CHECK_MSG(w0 < 0 || wrote < 1000, "one small Set wrote %lld bytes", wrote);
    /* 8 MB of changes to one key: the log is compacted into a new snapshot
     * once it passes 4 times the snapshot, so the file stays near 5 times
     * the state (without compaction it would reach 10 times) */
    for (int i = 0; i < 2000; i++) {
        snprintf(big, sizeof big, "%d", i);
        big[strlen(big)] = '-';
        MSR_CHECK_EQ(tc_set_key(co, &c, "big0", big), 0);
    }
    long sz = tc_file_size(t.path);
    MSR_CHECK_MSG(sz < 5 * with_big + with_big / 2, "state file of %ld bytes for %ld of state", sz,
                  with_big);
    MSR_CHECK_EQ(tc_set_key(co, &c, "small", "19999"), 0);
    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "big7";
    tc_call(co, &c, MSR_RPC_DELETE, &d.base);
    MSR_CHECK_EQ(c.code, 0);
    msr_tcall_reset(&c);
    msr_coord_t *again = tc_durable_coord(t.path);
    MSR_CHECK(strcmp(tc_get_key(again, "small"), "19999") == 0);
    MSR_CHECK(strcmp(tc_get_key(again, "big7"), "") == 0);
    MSR_CHECK_EQ(strlen(tc_get_key(again, "big8")), 255);
    msr_coord_destroy(again);
    msr_coord_destroy(co);
    tc_tmpstate_remove(&t);
}

/* The log is compacted into a new snapshot at the save after it reaches
 * MSR_LOG_COMPACT_MIN bytes (the bound for a small state), exactly. */
static void test_log_compaction_bound(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    msr_coord_t *co = tc_durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_set_key(co, &c, "a", "1"), 0);
    long snap = tc_file_size(t.path); /* the first save: a snapshot alone */
    enum { CHUNK = 40000 };
    static char value[3 * CHUNK];
    memset(value, 'v', sizeof value);
    value[CHUNK] = '\0';
    long before = tc_file_size(t.path);
    MSR_CHECK_EQ(tc_set_key(co, &c, "x", value), 0);
    long grow = tc_file_size(t.path) - before; /* a Set of CHUNK bytes */
    long rest = (long)MSR_LOG_COMPACT_MIN - (tc_file_size(t.path) - snap);
    while (rest > 2 * CHUNK) {
        MSR_CHECK_EQ(tc_set_key(co, &c, "x", value), 0);
        rest = (long)MSR_LOG_COMPACT_MIN - (tc_file_size(t.path) - snap);
    }
    /* the last Set's length brings the log to the bound exactly (the
     * lengths' varints are as long as for CHUNK) */
    value[CHUNK] = 'v';
    value[CHUNK + rest - grow] = '\0';
    MSR_CHECK_EQ(tc_set_key(co, &c, "x", value), 0);
    MSR_CHECK_EQ(tc_file_size(t.path) - snap, (long)MSR_LOG_COMPACT_MIN);
    MSR_CHECK_EQ(tc_set_key(co, &c, "y", "1"), 0);
    MSR_CHECK_MSG(tc_file_size(t.path) < 4 * CHUNK, "the log of %ld bytes is not compacted",
                  tc_file_size(t.path));
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    msr_coord_t *again = tc_durable_coord(t.path);
    MSR_CHECK_EQ(strlen(tc_get_key(again, "y")), 1);
    msr_coord_destroy(again);
    tc_tmpstate_remove(&t);
}

/* With stdin closed the state file may get descriptor 0: it is still the
 * open log, appended to (the same file), not rewritten at each save. */
static void test_state_file_fd_zero(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    int saved = dup(0);
    MSR_CHECK(saved >= 0);
    close(0);
    msr_coord_t *co = tc_durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_set_key(co, &c, "a", "1"), 0); /* the first save: a snapshot */
    struct stat first, next;
    MSR_CHECK(stat(t.path, &first) == 0);
    int zero = fcntl(0, F_GETFD) != -1; /* the state file's */
    MSR_CHECK_EQ(tc_set_key(co, &c, "b", "2"), 0);
    MSR_CHECK(stat(t.path, &next) == 0);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    MSR_CHECK(dup2(saved, 0) == 0);
    close(saved);
    MSR_CHECK(zero);
    MSR_CHECK_MSG(next.st_ino == first.st_ino && next.st_size > first.st_size,
                  "the save rewrote the file (inode %lu to %lu)", (unsigned long)first.st_ino,
                  (unsigned long)next.st_ino);
    tc_tmpstate_remove(&t);
}

/* A save cut short (the tail of the file torn or damaged) is cut off at
 * recovery: what came before is kept. */
static void test_torn_tail(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    msr_coord_t *co = tc_durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_set_key(co, &c, "one", "1"), 0);
    long good = tc_file_size(t.path);
    MSR_CHECK_EQ(tc_set_key(co, &c, "two", "2"), 0);
    long full = tc_file_size(t.path);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    /* the last record torn in the middle */
    MSR_CHECK(truncate(t.path, full - 3) == 0);
    co = tc_durable_coord(t.path);
    MSR_CHECK(strcmp(tc_get_key(co, "one"), "1") == 0);
    MSR_CHECK(strcmp(tc_get_key(co, "two"), "") == 0);
    MSR_CHECK_EQ(tc_set_key(co, &c, "three", "3"), 0);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    /* a damaged byte in the last record, and garbage after it */
    long len = tc_file_size(t.path);
    int fd = open(t.path, O_RDWR);
    MSR_CHECK(fd >= 0);
    char x;
    MSR_CHECK(pread(fd, &x, 1, len - 1) == 1);
    x ^= 0x40;
    MSR_CHECK(pwrite(fd, &x, 1, len - 1) == 1);
    MSR_CHECK(pwrite(fd, "\xff\xff\xff\x7f garbage", 12, len) == 12);
    close(fd);
    co = tc_durable_coord(t.path);
    MSR_CHECK(strcmp(tc_get_key(co, "one"), "1") == 0);
    MSR_CHECK(strcmp(tc_get_key(co, "three"), "") == 0);
    msr_coord_destroy(co);
    (void)good;
    tc_tmpstate_remove(&t);
}

/* The lines logged while a sink is set (log_lines_on), NUL-terminated. */
static char log_lines[8192];
static size_t log_used;

static void log_sink(void *arg, const char *line, size_t len)
{
    (void)arg;
    if (len > sizeof log_lines - 1 - log_used)
        len = sizeof log_lines - 1 - log_used;
    memcpy(log_lines + log_used, line, len);
    log_used += len;
    log_lines[log_used] = '\0';
}

/* A file of the format before sequence numbers ("MSRSTAT2": length and CRC
 * frames) whose last record is torn in its payload (its frame says 5
 * bytes, 2 follow): the changes before it are replayed, its 10 bytes cut
 * off (not taken for a record), and the cut not reported as failed. */
static void test_state_v2_torn_frame(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    msr_coord_t *a = plain_coord("job");
    tc_join(a, 0, 1, 1, 0);
    size_t slen = 0, clen = 0;
    uint8_t *snap = msr_coord_persist_snapshot_record(a, &slen);
    MSR_CHECK(snap != NULL);
    Msr__PersistedKey k = MSR__PERSISTED_KEY__INIT, *kp = &k;
    k.key = "k";
    k.value.data = (uint8_t *)"v2";
    k.value.len = 2;
    Msr__PersistedChange ch = MSR__PERSISTED_CHANGE__INIT;
    ch.n_set = 1;
    ch.set = &kp;
    uint8_t *change = etcd_frame(&ch.base, &clen);
    FILE *f = fopen(t.path, "wb");
    MSR_CHECK(f != NULL);
    MSR_CHECK(fwrite("MSRSTAT2", 1, 8, f) == 8 && fwrite(snap, 1, slen, f) == slen &&
              fwrite(change, 1, clen, f) == clen &&
              fwrite("\x05\x00\x00\x00\x01\x02\x03\x04"
                     "ab",
                     1, 10, f) == 10);
    fclose(f);
    log_used = 0;
    log_lines[0] = '\0';
    msr_log_set_sink(log_sink, NULL);
    msr_coord_t *co = tc_durable_coord(t.path);
    msr_log_set_sink(NULL, NULL);
    MSR_CHECK(strcmp(tc_get_key(co, "k"), "v2") == 0);
    MSR_CHECK_MSG(strstr(log_lines, "cutting off its last 10 bytes") != NULL &&
                      strstr(log_lines, "cannot cut") == NULL,
                  "%s", log_lines);
    msr_coord_destroy(co);
    free(change);
    msr_free(snap);
    msr_coord_destroy(a);
    tc_tmpstate_remove(&t);
}

/* Opens a coordinator on the first len bytes of the state file that whole
 * (of full bytes) held, with what it logs kept in log_lines. */
static msr_coord_t *open_cut(const char *path, const char *whole, long full, long len)
{
    FILE *f = fopen(path, "wb");
    MSR_CHECK(f != NULL);
    MSR_CHECK(fwrite(whole, 1, (size_t)full, f) == (size_t)full);
    fclose(f);
    MSR_CHECK(truncate(path, len) == 0);
    log_used = 0;
    log_lines[0] = '\0';
    msr_log_set_sink(log_sink, NULL);
    msr_coord_t *co = tc_durable_coord(path);
    msr_log_set_sink(NULL, NULL);
    return co;
}

/* A state file cut short at the bounds of its last record: by exactly one
 * byte and by all but one byte of it (a torn tail: cut off, the records
 * before it recovered), by the whole record (nothing torn: nothing cut,
 * nothing logged), and by one byte more (the record before is the torn
 * tail). The coordinator recovers and saves on after each. */
static void test_torn_tail_bounds(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    msr_coord_t *co = tc_durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_set_key(co, &c, "zero", "0"), 0); /* the log is open */
    long s1 = tc_file_size(t.path);
    MSR_CHECK_EQ(tc_set_key(co, &c, "one", "1"), 0);
    long s2 = tc_file_size(t.path);
    MSR_CHECK_EQ(tc_set_key(co, &c, "two", "2"), 0);
    long full = tc_file_size(t.path), last = full - s2;
    MSR_CHECK(s1 < s2 && last > 1);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    char *whole = malloc((size_t)full);
    int fd = open(t.path, O_RDONLY);
    MSR_CHECK(whole != NULL && fd >= 0 && read(fd, whole, (size_t)full) == full);
    close(fd);
    const struct {
        long cut, kept; /* bytes cut, where the recovered records end */
        int one;        /* whether "one" is recovered ("two" never is) */
    } cases[] = {{1, s2, 1}, {last - 1, s2, 1}, {last, s2, 1}, {last + 1, s1, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        co = open_cut(t.path, whole, full, full - cases[i].cut);
        MSR_CHECK_MSG(co != NULL, "cut by %ld bytes: refused", cases[i].cut);
        MSR_CHECK(strcmp(tc_get_key(co, "zero"), "0") == 0);
        MSR_CHECK(strcmp(tc_get_key(co, "one"), cases[i].one ? "1" : "") == 0);
        MSR_CHECK(strcmp(tc_get_key(co, "two"), "") == 0);
        /* a torn tail is cut off there and said so; a whole record's end is
         * no tear (the first save then rewrites the file: a fresh snapshot) */
        char said[64];
        snprintf(said, sizeof said, "cutting off its last %ld bytes",
                 full - cases[i].cut - cases[i].kept);
        int torn = cases[i].cut != last;
        MSR_CHECK_MSG((strstr(log_lines, said) != NULL) == torn &&
                          strstr(log_lines, "corrupt") == NULL &&
                          strstr(log_lines, "cannot cut") == NULL,
                      "cut by %ld bytes: %s", cases[i].cut, log_lines);
        MSR_CHECK_EQ(tc_set_key(co, &c, "after", "a"), 0); /* it saves on */
        msr_tcall_reset(&c);
        msr_coord_destroy(co);
        co = tc_durable_coord(t.path);
        MSR_CHECK(strcmp(tc_get_key(co, "after"), "a") == 0);
        msr_coord_destroy(co);
    }
    free(whole);
    tc_tmpstate_remove(&t);
}

/* Counts read from the state file are checked against the job: a file that
 * says the running generation has 1000 nodes of a 2-worker job is refused
 * (it used to be taken, and a report of rank 500 then wrote out of bounds). */
static void test_state_file_counts(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    const struct {
        int node_count, node_rank, generation;
        const char *what;
    } bad[] = {{1000, 0, 1, "node_count"}, {2, 7, 1, "node rank"}, {2, 0, -5, "generation"}};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(bad); i++) {
        Msr__PersistedNode n = MSR__PERSISTED_NODE__INIT;
        Msr__PersistedNode *np[1] = {&n};
        n.node_id = "aaaa";
        n.host = "127.0.0.1";
        n.local_worker_num = 1;
        n.wanted_rank = -1;
        n.rank = bad[i].node_rank;
        n.ready_generation = 1;
        n.alive = 1;
        Msr__PersistedState ps = MSR__PERSISTED_STATE__INIT;
        ps.version = 1;
        ps.job_id = "job";
        ps.worker_num = 2;
        ps.local_worker_num = 1;
        ps.max_restarts = 3;
        ps.state = MSR__JOB_STATE__JOB_RUNNING;
        ps.generation = bad[i].generation;
        ps.node_count = bad[i].node_count;
        ps.n_nodes = 1;
        ps.nodes = np;
        size_t len = protobuf_c_message_get_packed_size(&ps.base);
        uint8_t *buf = malloc(len);
        protobuf_c_message_pack(&ps.base, buf);
        FILE *f = fopen(t.path, "wb");
        MSR_CHECK(f != NULL && fwrite(buf, 1, len, f) == len);
        fclose(f);
        free(buf);
        msr_coord_config_t cfg = {.token = "t",
                                  .max_restarts = -1,
                                  .node_timeout_ms = 60000,
                                  .join_timeout_ms = 60000,
                                  .state_file = t.path};
        msr_coord_t *co = NULL;
        msr_status_t st = msr_coord_create(&cfg, &msr_tcall_responder, &co);
        if (st == MSR_OK) { /* what a report then does with it */
            tc_report(co, "aaaa", 1, 500, 0, 0);
            msr_coord_destroy(co);
        }
        MSR_CHECK_MSG(st == MSR_ERR_CORRUPT, "a state file with a bad %s was taken: %s",
                      bad[i].what, msr_status_str(st));
    }
    tc_tmpstate_remove(&t);
}

/* The state file is the coordinator's own: a symlink planted at its
 * temporary name is replaced, not followed; one planted at its name is
 * refused. */
static void test_state_file_symlinks(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    char tmp[200], victim[200];
    snprintf(tmp, sizeof tmp, "%s.tmp", t.path);
    snprintf(victim, sizeof victim, "%s/victim", t.dir);
    FILE *f = fopen(victim, "w");
    MSR_CHECK(f != NULL);
    fputs("keep", f);
    fclose(f);
    MSR_CHECK(symlink(victim, tmp) == 0);
    msr_coord_t *co = tc_durable_coord(t.path);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_set_key(co, &c, "k", "v"), 0);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    MSR_CHECK_EQ(tc_file_size(victim), 4);
    struct stat sb;
    MSR_CHECK(lstat(t.path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0600);
    MSR_CHECK(unlink(t.path) == 0);
    MSR_CHECK(symlink(victim, t.path) == 0);
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 1,
                              .local_worker_num = 1,
                              .max_restarts = 0,
                              .state_file = t.path};
    MSR_CHECK(msr_coord_create(&cfg, &msr_tcall_responder, &co) != MSR_OK);
    MSR_CHECK_EQ(tc_file_size(victim), 4);
    unlink(victim);
    tc_tmpstate_remove(&t);
}

static const msr_test_t tests[] = {
    {"persist_records", test_persist_records, 10},
    {"log_and_compaction", test_log_and_compaction, 30},
    {"log_compaction_bound", test_log_compaction_bound, 30},
    {"state_file_fd_zero", test_state_file_fd_zero, 10},
    {"torn_tail", test_torn_tail, 10},
    {"state_v2_torn_frame", test_state_v2_torn_frame, 10},
    {"torn_tail_bounds", test_torn_tail_bounds, 10},
    {"state_file_counts", test_state_file_counts, 10},
    {"state_file_symlinks", test_state_file_symlinks, 10},
};

const msr_test_piece_t tc_records_tests = MSR_TEST_PIECE(tests);

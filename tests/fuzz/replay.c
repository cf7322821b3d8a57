/* Replays fuzz inputs (files, or every file of directories) through the
 * harness without libFuzzer, so the kept corpus runs in every build.
 * With --seeds DIR it writes a set of valid starting inputs instead. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rendezvous/rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                return 1;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

/* ---- seeds ---- */

typedef struct seed {
    uint8_t data[8192];
    size_t len;
} seed_t;

static void seed_add(seed_t *s, int method, uint8_t flags, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    if (s->len + 3 + len > sizeof s->data)
        return;
    s->data[s->len++] = (uint8_t)(method | flags);
    s->data[s->len++] = (uint8_t)(len & 0xff);
    s->data[s->len++] = (uint8_t)(len >> 8);
    protobuf_c_message_pack(msg, s->data + s->len);
    s->len += len;
}

static void seed_write(const char *dir, const char *name, const seed_t *s)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(s->data, 1, s->len, f);
        fclose(f);
    }
}

static void join(seed_t *s, int rank)
{
    Msr__JoinRequest j = MSR__JOIN_REQUEST__INIT;
    j.protocol_version = MSR_PROTOCOL_VERSION;
    j.job_id = "job";
    j.host = "h";
    j.worker_num = 4;
    j.local_worker_num = 2;
    j.node_rank = rank;
    j.max_restarts = 1;
    seed_add(s, MSR_RPC_JOIN, 0, &j.base);
}

/* An empty seed whose first byte (the job, see fuzz_coord.c) is first. */
static void seed_begin(seed_t *s, uint8_t first)
{
    memset(s, 0, sizeof *s);
    s->data[s->len++] = first;
}

/* A job forming: two joins, heartbeats. */
static void seed_join(const char *dir)
{
    seed_t s;
    seed_begin(&s, 0);
    join(&s, -1);
    join(&s, 1);
    Msr__HeartbeatRequest h = MSR__HEARTBEAT_REQUEST__INIT;
    h.node_id = "0";
    h.wait_ms = 1000;
    seed_add(&s, MSR_RPC_HEARTBEAT, 0x20, &h.base);
    seed_write(dir, "seed-join", &s);
}

/* The store. */
static void seed_store(const char *dir)
{
    seed_t s;
    seed_begin(&s, 0);
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "k";
    g.wait_ms = 500;
    seed_add(&s, MSR_RPC_GET, 0, &g.base);
    Msr__SetRequest st = MSR__SET_REQUEST__INIT;
    st.key = "k";
    st.value.data = (uint8_t *)"v";
    st.value.len = 1;
    seed_add(&s, MSR_RPC_SET, 0, &st.base);
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = "c";
    a.delta = 3;
    seed_add(&s, MSR_RPC_ADD, 0, &a.base);
    Msr__CompareSetRequest cs = MSR__COMPARE_SET_REQUEST__INIT;
    cs.key = "k";
    cs.expect_absent = 1;
    seed_add(&s, MSR_RPC_COMPARE_SET, 0, &cs.base);
    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "k";
    seed_add(&s, MSR_RPC_DELETE, 0x20, &d.base);
    seed_write(dir, "seed-store", &s);
}

/* Barrier and allgather, with a cancel and a deadline. */
static void seed_collectives(const char *dir)
{
    seed_t s;
    seed_begin(&s, 0);
    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 3;
    b.weight = 2;
    b.wait_ms = 300;
    seed_add(&s, MSR_RPC_BARRIER, 0x40, &b.base);
    Msr__Contribution e = MSR__CONTRIBUTION__INIT, *ep[1] = {&e};
    e.index = 1;
    e.data.data = (uint8_t *)"abc";
    e.data.len = 3;
    Msr__AllgatherRequest ag = MSR__ALLGATHER_REQUEST__INIT;
    ag.name = "g";
    ag.count = 2;
    ag.n_entries = 1;
    ag.entries = ep;
    ag.wait_ms = 300;
    seed_add(&s, MSR_RPC_ALLGATHER, 0x10, &ag.base);
    e.index = 0;
    seed_add(&s, MSR_RPC_ALLGATHER, 0x20, &ag.base);
    seed_write(dir, "seed-collectives", &s);
}

/* Publish and fetch: a fetch held until its entries come, one that runs
 * out of time. */
static void seed_publish(const char *dir)
{
    seed_t s;
    seed_begin(&s, 0);
    Msr__Contribution e = MSR__CONTRIBUTION__INIT, *ep[1] = {&e};
    e.index = 0;
    e.data.data = (uint8_t *)"abc";
    e.data.len = 3;
    uint32_t want[2] = {1, 0};
    Msr__FetchRequest fr = MSR__FETCH_REQUEST__INIT;
    fr.name = "a";
    fr.n_indices = 2;
    fr.indices = want;
    fr.wait_ms = 300;
    /* fuzz_coord.c reads the op of MSR_RPC_BEAT as MSR_RPC_FETCH */
    seed_add(&s, MSR_RPC_BEAT, 0x10, &fr.base);
    Msr__PublishRequest pb = MSR__PUBLISH_REQUEST__INIT;
    pb.name = "a";
    pb.n_entries = 1;
    pb.entries = ep;
    seed_add(&s, MSR_RPC_PUBLISH, 0, &pb.base);
    e.index = 1;
    seed_add(&s, MSR_RPC_PUBLISH, 0, &pb.base);
    fr.indices = want;
    fr.n_indices = 1;
    want[0] = 7;
    seed_add(&s, MSR_RPC_BEAT, 0x40, &fr.base);
    seed_write(dir, "seed-publish", &s);
}

/* Failure and restart. */
static void seed_report(const char *dir)
{
    seed_t s;
    seed_begin(&s, 1);
    join(&s, 0);
    Msr__Failure fl = MSR__FAILURE__INIT;
    fl.rank = 1;
    fl.exit_code = 3;
    Msr__ReportRequest r = MSR__REPORT_REQUEST__INIT;
    r.node_id = "0";
    r.exit = &fl;
    seed_add(&s, MSR_RPC_REPORT, 0, &r.base);
    Msr__LeaveRequest lv = MSR__LEAVE_REQUEST__INIT;
    lv.node_id = "0";
    seed_add(&s, MSR_RPC_LEAVE, 0, &lv.base);
    Msr__StatusRequest sr = MSR__STATUS_REQUEST__INIT;
    seed_add(&s, MSR_RPC_STATUS, 0x20, &sr.base);
    seed_write(dir, "seed-report", &s);
}

static int write_seeds(const char *dir)
{
    mkdir(dir, 0755);
    seed_join(dir);
    seed_store(dir);
    seed_collectives(dir);
    seed_publish(dir);
    seed_report(dir);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--seeds") == 0)
        return write_seeds(argv[2]);
    int rc = 0, n = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            rc |= replay_file(argv[i]);
            n++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            rc |= replay_file(path);
            n++;
        }
        if (d)
            closedir(d);
    }
    printf("replayed %d inputs\n", n);
    return rc;
}

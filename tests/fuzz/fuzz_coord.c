/* Fuzzing the coordinator's request handling: the input is a sequence of
 * requests, each the bytes of a protobuf message for one method, fed to the
 * coordinator core through a responder that checks every call is answered
 * at most once and that every answer packs. Built two ways:
 *   - with libFuzzer (MSRUN_FUZZ=ON, clang): fuzz_coord [corpus dirs]
 *   - as a replay driver in every build: fuzz_coord_replay FILE|DIR...
 *
 * Input format, repeated: [op][len_lo][len_hi][len bytes]
 *   op & 0x0f: method (msr_rpc_method_t; values past the last are ticks),
 *              but MSR_RPC_BEAT (the coordinator only refuses it) stands
 *              for MSR_RPC_FETCH, which four bits cannot name
 *   op & 0x10: cancel the oldest held call afterwards
 *   op & 0x20: run the timers as if 100 ms had passed
 *   op & 0x40: the call's client deadline is 50 ms away
 * The first input byte picks the job: even = configured (4 workers, 2 per
 * node, 1 restart), odd = configured by the first node to join; with 0x02
 * set the coordinator keeps a state file: answers then wait for a save
 * (made after each op unless op & 0x80), and at the end the file must read
 * back into a new coordinator. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/time.h"
#include "cluster/coord.h"
#include "rendezvous/rpc.h"

typedef struct fcall {
    msr_rpc_method_t method;
    int answered;
    uint64_t deadline;
    void *data;
    struct fcall *next; /* held list */
} fcall_t;

static void check_answer(fcall_t *c)
{
    if (c->answered) {
        fprintf(stderr, "fuzz_coord: a call was answered twice\n");
        abort();
    }
    c->answered = 1;
}

/* Node ids the coordinator gave out, so that inputs can name them by number
 * (a heartbeat for node "1" means the second node that joined). */
static char joined_ids[16][32];
static int njoined;

static void f_reply(void *call, const ProtobufCMessage *resp)
{
    fcall_t *c = call;
    check_answer(c);
    if (c->method == MSR_RPC_JOIN && njoined < 16)
        snprintf(joined_ids[njoined++], sizeof joined_ids[0], "%s",
                 ((const Msr__JoinResponse *)resp)->node_id);
    if (resp->descriptor != msr_rpc_methods[c->method].response) {
        fprintf(stderr, "fuzz_coord: %s answered with a %s\n", msr_rpc_methods[c->method].name,
                resp->descriptor->name);
        abort();
    }
    size_t len = protobuf_c_message_get_packed_size(resp);
    uint8_t *buf = malloc(len + 1);
    if (buf && protobuf_c_message_pack(resp, buf) != len)
        abort();
    free(buf);
}

static void f_reply_blob(void *call, msr_blob_t *blob)
{
    fcall_t *c = call;
    check_answer(c);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(msr_rpc_methods[c->method].response, NULL, blob->len, blob->data);
    if (m == NULL) {
        fprintf(stderr, "fuzz_coord: a shared answer does not unpack\n");
        abort();
    }
    protobuf_c_message_free_unpacked(m, NULL);
}

static void f_fail(void *call, int code, const char *message)
{
    fcall_t *c = call;
    check_answer(c);
    if (code == 0 || message == NULL)
        abort();
}

static uint64_t f_deadline(void *call)
{
    return ((fcall_t *)call)->deadline;
}

static const char *f_peer(void *call)
{
    (void)call;
    return "fuzz";
}

static void f_set_data(void *call, void *data)
{
    ((fcall_t *)call)->data = data;
}

static void *f_get_data(void *call)
{
    return ((fcall_t *)call)->data;
}

static const msr_coord_responder_t responder = {f_reply, f_reply_blob, f_fail,    f_deadline,
                                                f_peer,  f_set_data,   f_get_data};

/* The job the first input byte picks (see the top); with 0x02 a state file
 * in a new temporary directory dir (path, or "" when none could be made). */
static void fuzz_config(uint8_t first, msr_coord_config_t *cfg, char *dir, char *path,
                        size_t pathlen)
{
    *cfg = (msr_coord_config_t){.token = "t", .node_timeout_ms = 200, .join_timeout_ms = 60000};
    if ((first & 1) == 0) {
        cfg->job_id = "job";
        cfg->worker_num = 4;
        cfg->local_worker_num = 2;
        cfg->max_restarts = 1;
    } else {
        cfg->max_restarts = -1;
    }
    if ((first & 2) && mkdtemp(dir) != NULL) {
        snprintf(path, pathlen, "%s/state", dir);
        cfg->state_file = path;
    }
}

/* A call of method m with the request in data[0..len) (nothing when it
 * does not unpack), added to *all. A node id of one digit names the
 * node that joined so many joins before. */
static void feed_call(msr_coord_t *co, fcall_t **all, uint8_t op, unsigned m, const uint8_t *data,
                      size_t len)
{
    ProtobufCMessage *req = msr_rpc_request_unpack((msr_rpc_method_t)m, data, len);
    if (req == NULL)
        return;
    char **id = m == MSR_RPC_HEARTBEAT ? &((Msr__HeartbeatRequest *)req)->node_id
                : m == MSR_RPC_REPORT  ? &((Msr__ReportRequest *)req)->node_id
                : m == MSR_RPC_LEAVE   ? &((Msr__LeaveRequest *)req)->node_id
                : m == MSR_RPC_JOIN    ? &((Msr__JoinRequest *)req)->node_id
                                       : NULL;
    char *saved = NULL;
    if (id && *id && (*id)[0] >= '0' && (*id)[0] <= '9' && (*id)[1] == '\0' &&
        (*id)[0] - '0' < njoined) {
        saved = *id; /* restored before freeing: it belongs to req */
        *id = joined_ids[(*id)[0] - '0'];
    }
    fcall_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        abort();
    c->method = (msr_rpc_method_t)m;
    c->deadline = op & 0x40 ? msr_now_ns() + 50000000ull : MSR_DEADLINE_NEVER;
    c->next = *all;
    *all = c;
    msr_coord_call(co, c, c->method, req);
    if (saved)
        *id = saved;
    msr_rpc_message_free(req);
}

/* The client of the oldest unanswered call goes away. */
static void cancel_oldest(msr_coord_t *co, fcall_t *all)
{
    fcall_t *held = NULL;
    for (fcall_t *c = all; c; c = c->next)
        if (!c->answered)
            held = c;
    if (held) {
        msr_coord_cancel(co, held);
        held->answered = 1; /* gone: must not be answered now */
        held->data = NULL;
    }
}

/* Whatever the coordinator saved, a restarted one reads back; then the
 * state file and its directory are removed. */
static void check_read_back(const msr_coord_config_t *cfg, const char *dir, const char *path)
{
    msr_coord_t *co = NULL;
    if (msr_coord_create(cfg, &responder, &co) != MSR_OK) {
        fprintf(stderr, "fuzz_coord: the state file it wrote does not read back\n");
        abort();
    }
    msr_coord_destroy(co);
    char tmp[80];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(path);
    unlink(tmp);
    rmdir(dir);
}

/* Every call was answered (or its client went away); frees them. */
static void check_answered(fcall_t *all)
{
    for (fcall_t *c = all; c;) {
        fcall_t *next = c->next;
        if (!c->answered) {
            fprintf(stderr, "fuzz_coord: a %s call was never answered\n",
                    msr_rpc_methods[c->method].name);
            abort();
        }
        free(c);
        c = next;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the coordinator's refusals and warnings are expected here: keep the
     * fuzzer's output (and speed) for what matters */
    msr_log_set_level(MSR_LOG_ERROR);
    if (size < 1)
        return 0;
    msr_coord_config_t cfg;
    char dir[] = "/tmp/msrun-fuzz-XXXXXX", path[64] = "";
    fuzz_config(data[0], &cfg, dir, path, sizeof path);
    msr_coord_t *co = NULL;
    if (msr_coord_create(&cfg, &responder, &co) != MSR_OK) {
        if (path[0])
            rmdir(dir);
        return 0;
    }
    njoined = 0;
    fcall_t *all = NULL; /* every call made, freed at the end */
    size_t i = 1;
    uint64_t clock = msr_now_ns();
    while (i + 3 <= size) {
        uint8_t op = data[i];
        size_t len = (size_t)data[i + 1] | ((size_t)data[i + 2] << 8);
        i += 3;
        if (len > size - i)
            len = size - i;
        unsigned m = op & 0x0f;
        if (m == MSR_RPC_BEAT)
            m = MSR_RPC_FETCH;
        if (m < MSR_RPC_METHOD_COUNT)
            feed_call(co, &all, op, m, data + i, len);
        i += len;
        if (op & 0x10)
            cancel_oldest(co, all);
        if (op & 0x20) {
            clock += 100000000ull;
            msr_coord_tick(co, clock);
        }
        if (!(op & 0x80))
            msr_coord_flush(co); /* as the server does after each batch */
    }
    msr_coord_tick(co, clock);
    msr_coord_destroy(co); /* answers everything still held */
    if (path[0])
        check_read_back(&cfg, dir, path);
    check_answered(all);
    return 0;
}

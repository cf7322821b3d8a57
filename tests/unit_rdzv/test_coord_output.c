/* /api/output: a rank's last lines through its node's heartbeat, their
 * bounds, the total of bytes kept, ranks never asked for, and the oldest
 * record evicted first. */
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

#include "base/time.h"
#include "base/status.h"
#include "tests/unit_rdzv/test_coord.h"

/* ---- /api/output: a rank's last lines through its node's heartbeat ---- */

/* The JSON of /api/output for rank (into out) and its HTTP status. */
static int output(msr_coord_t *co, int rank, char *out, size_t len)
{
    msr_buf_t b = MSR_BUF_INIT;
    int code = msr_coord_render_output(co, rank, msr_now_ns(), &b);
    snprintf(out, len, "%.*s", (int)b.len, b.data ? b.data : "");
    msr_buf_cleanup(&b);
    return code;
}

static void test_output_tail(void)
{
    tc_job_node_timeout_ms = 300;
    msr_coord_t *co = tc_make_coord(4, 2, 1);
    tc_job_node_timeout_ms = LONG_NODE_TIMEOUT_MS;
    const char *a = tc_join(co, 0, 4, 2, 0);
    const char *b = tc_join(co, 1, 4, 2, 1);
    tcall_t held = {0}, c = {0};
    tc_beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(tc_beat(co, &c, b, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    char js[4096];
    MSR_CHECK_EQ(output(co, 4, js, sizeof js), 404);
    MSR_CHECK_MSG(strstr(js, "world size 4"), "%s", js);
    MSR_CHECK_EQ(output(co, -1, js, sizeof js), 404);
    /* nobody asks: a heartbeat is held as before and carries no ranks */
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = (char *)b;
    r.known_state = MSR__JOB_STATE__JOB_RUNNING;
    r.wait_ms = 5000;
    tc_call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(!held.answered);
    /* an ask for rank 3 (node 1) answers node 1's held heartbeat at once */
    MSR_CHECK_EQ(output(co, 3, js, sizeof js), 202);
    MSR_CHECK_MSG(strstr(js, "\"pending\":true"), "%s", js);
    MSR_CHECK(held.answered && held.code == 0);
    Msr__HeartbeatResponse *hr = (Msr__HeartbeatResponse *)held.resp;
    MSR_CHECK_EQ(hr->n_output_ranks, 1);
    MSR_CHECK_EQ(hr->output_ranks[0], 3);
    MSR_CHECK_EQ(output(co, 3, js, sizeof js), 202); /* still on its way; asked once */
    /* node 0's own heartbeats are not disturbed */
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->n_output_ranks, 0);
    /* node 1's next heartbeat brings the lines: binary bytes, quotes,
     * valid UTF-8, a line past the bound */
    char long_line[1000];
    memset(long_line, 'x', sizeof long_line);
    ProtobufCBinaryData lines[] = {
        {5, (uint8_t *)"first"},
        {8, (uint8_t *)"a\x01\xff\"b\\\n\x7f"},
        {5, (uint8_t *)"\xc3\xa9t\xc3\xa9"},
        {4, (uint8_t *)"\xe2\x82\xac\xc0"}, /* a euro sign, then a lone lead byte */
        {sizeof long_line, (uint8_t *)long_line},
    };
    Msr__RankOutput o = MSR__RANK_OUTPUT__INIT, *op = &o;
    o.rank = 3;
    o.time = 1795700000.5;
    o.total_lines = 77;
    o.n_lines = MSR_ARRAY_SIZE(lines);
    o.lines = lines;
    Msr__RankOutput other = MSR__RANK_OUTPUT__INIT, *ops[] = {op, &other};
    other.rank = 1; /* node 0's rank, not asked of node 1: ignored */
    MSR_CHECK_EQ(output(co, 1, js, sizeof js), 202); /* asked of node 0 */
    r.n_outputs = 2;
    r.outputs = ops;
    tc_call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(!held.answered); /* nothing more to ask: held again */
    MSR_CHECK_EQ(output(co, 3, js, sizeof js), 200);
    char want[1200];
    snprintf(want, sizeof want,
             "\"lines\":[\"first\",\"a\\u0001\\ufffd\\\"b\\\\\\u000a\\u007f\","
             "\"\xc3\xa9t\xc3\xa9\",\"\xe2\x82\xac\\ufffd\",\"%.*s\"]",
             MSR_OUTPUT_LINE_MAX, long_line);
    MSR_CHECK_MSG(strstr(js, want), "%s", js);
    MSR_CHECK_MSG(strstr(js, "\"rank\":3,\"node\":1,") && strstr(js, "\"time\":1795700000.500") &&
                      strstr(js, "\"total_lines\":77") && !strstr(js, "stale"),
                  "%s", js);
    MSR_CHECK_EQ(output(co, 1, js, sizeof js), 202); /* node 1 cannot answer for node 0 */
    /* asked again: a new ask, answered only by lines sent after it */
    MSR_CHECK_EQ(output(co, 3, js, sizeof js), 202);
    MSR_CHECK(held.answered && ((Msr__HeartbeatResponse *)held.resp)->n_output_ranks == 1);
    /* node 1 is lost (a keeps beating): the last lines known, and why they
     * are old */
    const char *live[] = {a};
    tc_beat_until_changed(co, live, 1, 0, MSR__JOB_STATE__JOB_RUNNING, 5000);
    MSR_CHECK_EQ(output(co, 3, js, sizeof js), 200);
    MSR_CHECK_MSG(strstr(js, "\"stale\":\"node 1 of rank 3 is gone\"") && strstr(js, "\"first\""),
                  "%s", js);
    MSR_CHECK_EQ(output(co, 2, js, sizeof js), 200); /* never fetched: no lines */
    MSR_CHECK_MSG(strstr(js, "\"lines\":[]") && strstr(js, "\"time\":null"), "%s", js);
    msr_tcall_reset(&held);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* Asks are bounded, and an ask its node never answers ends after
 * MSR_OUTPUT_WAIT_MS with the lines known. */
static void test_output_bounds(void)
{
    msr_coord_t *co = tc_make_coord(128, 128, 0);
    const char *a = tc_join(co, 0, 128, 128, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    char js[512];
    for (int rank = 0; rank < MSR_OUTPUT_ASKS_MAX; rank++)
        MSR_CHECK_EQ(output(co, rank, js, sizeof js), 202);
    MSR_CHECK_EQ(output(co, MSR_OUTPUT_ASKS_MAX, js, sizeof js), 503);
    MSR_CHECK_MSG(strstr(js, "too many"), "%s", js);
    /* the node's next heartbeat, a long poll, is answered at once with
     * every ask */
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = (char *)a;
    r.known_state = MSR__JOB_STATE__JOB_RUNNING;
    r.wait_ms = 5000;
    tc_call(co, &c, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(c.answered && c.code == 0);
    MSR_CHECK_EQ(((Msr__HeartbeatResponse *)c.resp)->n_output_ranks, MSR_OUTPUT_ASKS_MAX);
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->n_output_ranks, 0);
    msr_buf_t b = MSR_BUF_INIT;
    uint64_t late = msr_now_ns() + (MSR_OUTPUT_WAIT_MS + 100) * 1000000ull;
    MSR_CHECK_EQ(msr_coord_render_output(co, 5, late, &b), 200);
    MSR_CHECK_MSG(strstr(b.data, "did not send the lines within 5 s"), "%.*s", (int)b.len, b.data);
    msr_buf_cleanup(&b);
    MSR_CHECK_EQ(output(co, MSR_OUTPUT_ASKS_MAX, js, sizeof js), 202); /* room again */
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* /api/output keeps at most MSR_OUTPUT_BYTES of a rank's lines in total
 * (each line cut to MSR_OUTPUT_LINE_MAX first): lines that sum to exactly
 * the bound are all kept, one byte more drops the line that crosses it. */
static void test_output_bytes_total(void)
{
    msr_coord_t *co = tc_make_coord(2, 2, 0);
    const char *a = tc_join(co, 0, 2, 2, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    enum { FULL = MSR_OUTPUT_BYTES / MSR_OUTPUT_LINE_MAX }; /* 20 whole lines, A to T */
    static uint8_t text[FULL + 1][MSR_OUTPUT_LINE_MAX + 10];
    ProtobufCBinaryData lines[FULL + 1];
    for (int k = 0; k <= FULL; k++) { /* the last, U, crosses the bound */
        memset(text[k], 'A' + k, sizeof text[k]);
        lines[k].data = text[k];
        lines[k].len = sizeof text[k]; /* cut to MSR_OUTPUT_LINE_MAX */
    }
    size_t rest = MSR_OUTPUT_BYTES - FULL * MSR_OUTPUT_LINE_MAX; /* 192 */
    char js[64], last[MSR_OUTPUT_LINE_MAX + 8];
    for (int rank = 0; rank < 2; rank++) { /* rank 0: exactly the bound; 1: one past */
        lines[FULL].len = rest + (size_t)rank;
        MSR_CHECK_EQ(output(co, rank, js, sizeof js), 202);
        MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->n_output_ranks, 1);
        Msr__RankOutput o = MSR__RANK_OUTPUT__INIT, *op = &o;
        o.rank = rank;
        o.total_lines = FULL + 1;
        o.n_lines = FULL + 1;
        o.lines = lines;
        Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
        r.node_id = (char *)a;
        r.n_outputs = 1;
        r.outputs = &op;
        tc_call(co, &c, MSR_RPC_HEARTBEAT, &r.base);
        MSR_CHECK(c.answered && c.code == 0);
        msr_buf_t b = MSR_BUF_INIT;
        MSR_CHECK_EQ(msr_coord_render_output(co, rank, msr_now_ns(), &b), 200);
        MSR_CHECK(msr_buf_append(&b, "", 1) == MSR_OK);
        /* the last whole line is there either way, cut to the line bound */
        snprintf(last, sizeof last, ",\"%.*s\"", MSR_OUTPUT_LINE_MAX, (const char *)text[FULL - 1]);
        MSR_CHECK_MSG(strstr(b.data, last) != NULL, "rank %d: %.300s", rank, b.data);
        snprintf(last, sizeof last, ",\"%.*s\"]", (int)lines[FULL].len, (const char *)text[FULL]);
        if (rank == 0)
            MSR_CHECK_MSG(strstr(b.data, last) != NULL, "the line at the bound is missing");
        else
            MSR_CHECK_MSG(strstr(b.data, "UUUU") == NULL, "the line past the bound is kept");
        msr_buf_cleanup(&b);
    }
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* Lines for a rank nobody asked, in a heartbeat, are ignored (the rank has
 * a slot, and no record); an ask made at the clock's time 0 is still an
 * ask. */
static void test_output_unasked_and_time_zero(void)
{
    msr_coord_t *co = tc_make_coord(2, 2, 0);
    const char *a = tc_join(co, 0, 2, 2, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    char js[512];
    MSR_CHECK_EQ(output(co, 0, js, sizeof js), 202);
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->n_output_ranks, 1);
    ProtobufCBinaryData line = {4, (uint8_t *)"line"};
    Msr__RankOutput o = MSR__RANK_OUTPUT__INIT, *op = &o;
    o.rank = 1; /* not asked: no record */
    o.n_lines = 1;
    o.lines = &line;
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = (char *)a;
    r.n_outputs = 1;
    r.outputs = &op;
    tc_call(co, &c, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(c.answered && c.code == 0);
    msr_buf_t b = MSR_BUF_INIT;
    MSR_CHECK_EQ(msr_coord_render_output(co, 1, 0, &b), 202);
    msr_buf_cleanup(&b);
    Msr__HeartbeatResponse *hr = tc_beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(hr->n_output_ranks, 1);
    MSR_CHECK_EQ(hr->n_output_ranks ? hr->output_ranks[0] : -1, 1);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* With MSR_OUTPUT_KEPT_MAX ranks' lines kept, a new rank's record takes the
 * place of the one kept longest. */
static void test_output_evicts_oldest(void)
{
    enum { N = MSR_OUTPUT_KEPT_MAX + 1 };
    msr_coord_t *co = tc_make_coord(N, N, 0);
    const char *a = tc_join(co, 0, N, N, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    char js[512];
    ProtobufCBinaryData line = {4, (uint8_t *)"kept"};
    for (int rank = 0; rank < MSR_OUTPUT_KEPT_MAX; rank++) { /* rank 0 the oldest */
        MSR_CHECK_EQ(output(co, rank, js, sizeof js), 202);
        MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->n_output_ranks, 1);
        Msr__RankOutput o = MSR__RANK_OUTPUT__INIT, *op = &o;
        o.rank = rank;
        o.n_lines = 1;
        o.lines = &line;
        Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
        r.node_id = (char *)a;
        r.n_outputs = 1;
        r.outputs = &op;
        tc_call(co, &c, MSR_RPC_HEARTBEAT, &r.base);
        MSR_CHECK(c.answered && c.code == 0);
        MSR_CHECK_EQ(output(co, rank, js, sizeof js), 200);
    }
    MSR_CHECK_EQ(output(co, N - 1, js, sizeof js), 202); /* a new record */
    uint64_t late = msr_now_ns() + (MSR_OUTPUT_WAIT_MS + 100) * 1000000ull;
    const int ranks[] = {N - 2, 0};
    const char *want[] = {"\"lines\":[\"kept\"]", "\"lines\":[]"};
    for (int k = 0; k < 2; k++) { /* the newest kept; the oldest gone */
        MSR_CHECK_EQ(output(co, ranks[k], js, sizeof js), 202);
        msr_buf_t b = MSR_BUF_INIT;
        MSR_CHECK_EQ(msr_coord_render_output(co, ranks[k], late, &b), 200);
        MSR_CHECK_MSG(b.len && memmem(b.data, b.len, want[k], strlen(want[k])), "rank %d: %.*s",
                      ranks[k], (int)b.len, b.data);
        msr_buf_cleanup(&b);
    }
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static const msr_test_t tests[] = {
    {"output_tail", test_output_tail, 10},
    {"output_bounds", test_output_bounds, 10},
    {"output_bytes_total", test_output_bytes_total, 10},
    {"output_unasked_and_time_zero", test_output_unasked_and_time_zero, 10},
    {"output_evicts_oldest", test_output_evicts_oldest, 30},
};

const msr_test_piece_t tc_output_tests = MSR_TEST_PIECE(tests);

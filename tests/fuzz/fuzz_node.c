/* Fuzzing the node's state machine (msrun/node.h): the input is a sequence
 * of events (answers to what the node sent, worker exits, beats, signals,
 * the time) fed to the machine, whose actions a model of the agent
 * performs. After every event the invariants must hold:
 *   - workers are spawned only when none of the old ones is left;
 *   - the exit code follows the root cause (128 + the interrupting signal;
 *     the failure's code when the job failed; 0 when it is done);
 *   - nothing comes after ACT_EXIT, and ACT_EXIT comes once;
 *   - while the node waits, a deadline is armed: for a join or heartbeat
 *     answer or its retry, for the workers' stop, for the beat check;
 *   - the machine's counts (running workers, heartbeats in flight) match
 *     what it was told.
 * Built two ways, as fuzz_coord: with libFuzzer (MSRUN_FUZZ=ON, clang):
 * fuzz_node [corpus dirs]; as a replay driver in every build:
 * fuzz_node_replay FILE|DIR...
 *
 * Input: byte 0 picks the node (1-4 workers, beat check on or off, the
 * grace period); then events, each an op byte and up to 3 argument bytes
 * (missing bytes read as 0). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "launcher/node.h"

#define MS 1000000ull

typedef struct model {
    msr_node_t n;
    const uint8_t *in;
    size_t len, pos;
    uint64_t now;
    int join_out;      /* a join awaits its answer */
    int hb_out;        /* heartbeats awaiting answers */
    int running[4];    /* workers started and not seen exit or released */
    int fail_send;     /* the next JOIN or HEARTBEAT cannot be sent */
    int fail_spawn;    /* the next spawn fails at this worker + 1; 0: it works */
    int exited;        /* ACT_EXIT seen */
    int left;          /* ACT_LEAVE seen */
    int coord_stopped; /* ACT_COORD_STOP seen */
} model_t;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            fprintf(stderr, "fuzz_node: " __VA_ARGS__); \
            fprintf(stderr, " (%s)\n", #cond);          \
            abort();                                    \
        }                                               \
    } while (0)

static uint8_t byte(model_t *m)
{
    return m->pos < m->len ? m->in[m->pos++] : 0;
}

static int nrunning(const model_t *m)
{
    int k = 0;
    for (int i = 0; i < m->n.cfg.nworkers; i++)
        k += m->running[i];
    return k;
}

static void spawn(model_t *m, int from)
{
    if (from == 0)
        CHECK(nrunning(m) == 0, "spawned while %d old workers live", nrunning(m));
    CHECK(from >= 0 && from < m->n.cfg.nworkers, "spawn from worker %d", from);
    CHECK(!m->n.stopping, "a spawn while stopping");
    for (int i = from; i < m->n.cfg.nworkers; i++) {
        CHECK(!m->running[i], "worker %d started twice", i);
        if (m->fail_spawn == i + 1) {
            m->fail_spawn = 0;
            msr_node_on_spawn_failed(&m->n, m->now, "rank: cannot run it");
            return;
        }
        m->running[i] = 1;
        msr_node_on_spawned(&m->n, i, 1000 + i);
        if (i + 1 < m->n.cfg.nworkers && (byte(m) & 3) == 0) {
            msr_node_on_spawn_paused(&m->n, m->now, i + 1); /* the loop's turn */
            return;
        }
    }
}

static void check_exit(model_t *m, const msr_node_action_t *a)
{
    const msr_node_t *n = &m->n;
    CHECK(!m->exited, "a second exit");
    CHECK(m->coord_stopped, "exit before the coordinator's stop");
    CHECK(m->left == n->joined, "left %d, joined %d", m->left, n->joined);
    CHECK(a->code >= 0 && a->code < 256, "exit code %d", a->code);
    if (n->interrupted > 0)
        CHECK(a->code == 128 + n->interrupted, "interrupted by %d, exit %d", n->interrupted,
              a->code);
    else if (n->interrupted == 0 && n->joined && n->state == MSR_JOB_FAILED)
        /* the root cause's status, or "never formed" when nothing ran */
        CHECK(a->code == (!n->cause.set && !n->spawned ? MSR_EXIT_NOT_FORMED
                                                       : msr_failure_exit_code(&n->cause)),
              "failed job, exit %d", a->code);
    else if (n->interrupted == 0 && n->joined && n->state == MSR_JOB_DONE)
        CHECK(a->code == 0, "done job, exit %d", a->code);
    m->exited = 1;
}

static void perform(model_t *m, const msr_node_action_t *a)
{
    CHECK(!m->exited, "action %d after the exit", (int)a->kind);
    switch (a->kind) {
    case MSR_NODE_ACT_JOIN:
        CHECK(!m->join_out && !m->n.joined, "a second join");
        if (m->fail_send) {
            m->fail_send = 0;
            msr_node_on_send_failed(&m->n, m->now, "cannot send");
        } else {
            m->join_out = 1;
        }
        break;
    case MSR_NODE_ACT_HEARTBEAT:
        CHECK(m->n.joined, "a heartbeat before joining");
        if (m->fail_send) {
            m->fail_send = 0;
            msr_node_on_send_failed(&m->n, m->now, "cannot send");
        } else {
            m->hb_out++;
        }
        break;
    case MSR_NODE_ACT_SPAWN:
        spawn(m, a->local);
        break;
    case MSR_NODE_ACT_POLL_BEATS:
        for (int i = 0; i < m->n.cfg.nworkers; i++)
            if (m->running[i]) {
                uint64_t ago = (uint64_t)byte(m) * 20 * MS;
                uint64_t last = m->now > ago ? m->now - ago : 0;
                msr_node_on_beat(&m->n, m->now, i, last, byte(m) & 3, last);
            }
        break;
    case MSR_NODE_ACT_SIGNAL:
        CHECK(a->local < m->n.cfg.nworkers, "signal to worker %d", a->local);
        break;
    case MSR_NODE_ACT_REPORT:
        CHECK(a->local >= 0 && !m->running[a->local], "report of a live worker");
        break;
    case MSR_NODE_ACT_RELEASE:
        /* workers left are given up on (they would not die) */
        memset(m->running, 0, sizeof m->running);
        break;
    case MSR_NODE_ACT_LEAVE:
        CHECK(!m->left && m->n.joined, "leave");
        m->left = 1;
        break;
    case MSR_NODE_ACT_COORD_STOP:
        m->coord_stopped = 1;
        break;
    case MSR_NODE_ACT_EXIT:
        check_exit(m, a);
        break;
    case MSR_NODE_ACT_LOG_RANK:
    case MSR_NODE_ACT_COORD_RESTART:
        break;
    }
}

static void drain(model_t *m)
{
    msr_node_action_t a;
    while (msr_node_next_action(&m->n, &a))
        perform(m, &a);
    const msr_node_t *n = &m->n;
    CHECK(n->nrunning == nrunning(m), "machine counts %d running, %d are", n->nrunning,
          nrunning(m));
    if (n->finished) {
        CHECK(m->exited, "finished without an exit");
        return;
    }
    CHECK(n->hb_inflight == m->hb_out, "%d heartbeats in flight, machine counts %d", m->hb_out,
          n->hb_inflight);
    if (n->stopping)
        CHECK(n->kill_at || n->stuck_at, "stopping without a deadline");
    if (!n->joined)
        CHECK(m->join_out || n->retry_at, "joining with nothing in flight or armed");
    else if (!(n->stopping && n->interrupted)) /* on the way out, only the stop is awaited */
        CHECK(m->hb_out > 0 || n->retry_at,
              "following with nothing in flight or armed (interrupted %d, stopping %d)",
              n->interrupted, n->stopping);
    if (n->cfg.worker_timeout_ms > 0)
        CHECK(n->hang_at, "the beat check is not armed");
}

static void update(model_t *m)
{
    uint8_t b = byte(m), g = byte(m), c = byte(m);
    msr_failure_t f = {0};
    msr_node_update_t u = {
        .generation = g & 3,
        .state = (msr_job_state_t)(b % 6),
        .restart_count = (g >> 2) & 3,
        .max_restarts = 3,
        .message = (b & 0x40) ? "restart 1 of 3" : "",
        .has_assignment = (b & 0x08) != 0,
        .node_rank = (g >> 4) & 1,
        .node_count = 2,
        .world_size = 2 * m->n.cfg.nworkers,
        .rank_offset = ((g >> 4) & 1) * m->n.cfg.nworkers,
        .master_addr = "127.0.0.1",
        .master_port = 1,
        .joined_nodes = c & 1,
        .expected_nodes = 2,
        .missing = "1",
    };
    if (b & 0x10) {
        f.set = 1;
        f.rank = (c >> 1) & 7;
        f.exit_code = (c & 0x10) ? -1 : (c >> 5);
        f.signal = (c & 0x10) ? SIGKILL : 0;
        f.generation = g & 3;
        f.tail[0] = msr_strdup("last line");
        f.ntail = f.tail[0] != NULL;
        u.failure = &f;
    }
    m->hb_out--;
    msr_node_on_update(&m->n, m->now, &u);
    msr_failure_clear(&f);
}

static void worker_exit(model_t *m)
{
    uint8_t w = byte(m), how = byte(m);
    int nw = m->n.cfg.nworkers, i = w % nw;
    for (int k = 0; k < nw && !m->running[i]; k++)
        i = (i + 1) % nw;
    if (!m->running[i])
        return;
    m->running[i] = 0;
    static const int sigs[] = {SIGKILL, SIGTERM, SIGSEGV, SIGINT};
    if (how & 0x80)
        msr_node_on_worker_exit(&m->n, i, -1, sigs[how & 3]);
    else
        msr_node_on_worker_exit(&m->n, i, how & 3, 0);
}

static void step(model_t *m, uint8_t op)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
    uint8_t b;
    switch (op % 11) {
    case 0: /* time passes: a little, or to the next deadline */
        b = byte(m);
        if ((b & 0x80) && msr_node_next_deadline(&m->n) > m->now)
            m->now = msr_node_next_deadline(&m->n);
        else
            m->now += (uint64_t)(b & 0x7f) * 50 * MS;
        msr_node_on_tick(&m->n, m->now);
        break;
    case 1:
        if (m->join_out) {
            m->join_out = 0;
            msr_node_on_joined(&m->n, m->now, byte(m) & 3, 3);
        }
        break;
    case 2:
        if (m->join_out) {
            m->join_out = 0;
            msr_node_on_join_failed(&m->n, m->now, (msr_node_join_error_t)(byte(m) % 3), "no");
        }
        break;
    case 3:
    case 4:
        if (m->hb_out > 0)
            update(m);
        break;
    case 5:
        if (m->hb_out > 0) {
            m->hb_out--;
            msr_node_on_heartbeat_failed(&m->n, m->now, (byte(m) & 7) == 0, "unavailable");
        }
        break;
    case 6:
    case 7:
        worker_exit(m);
        break;
    case 8:
        msr_node_on_signal(&m->n, m->now, sigs[byte(m) % 5]);
        break;
    case 9:
        msr_node_on_coord_exit(&m->n, m->now, "code 1", byte(m) & 1);
        break;
    case 10:
        b = byte(m);
        if (b & 1)
            m->fail_send = 1;
        else
            m->fail_spawn = 1 + (b >> 1) % m->n.cfg.nworkers;
        break;
    }
    drain(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        msr_log_set_level(MSR_LOG_ERROR); /* the machine's warnings are noise here */
        quiet = 1;
    }
    static model_t m;
    memset(&m, 0, sizeof m);
    m.in = data;
    m.len = size;
    uint8_t cfgb = byte(&m);
    msr_node_config_t cfg = {
        .nworkers = 1 + (cfgb & 3),
        .grace_ms = ((cfgb >> 3) & 3) * 500,
        .coordinator_timeout_ms = 3000,
        .cluster_time_out_ms = 5000,
        .worker_timeout_ms = (cfgb & 4) ? 1000 : 0,
        .coord_target = "127.0.0.1:1",
        .seed = 1 + cfgb,
    };
    if (msr_node_init(&m.n, &cfg) != MSR_OK)
        return 0;
    m.now = 1000 * MS;
    msr_node_on_start(&m.n, m.now);
    drain(&m);
    while (m.pos < m.len)
        step(&m, byte(&m));
    msr_node_cleanup(&m.n);
    return 0;
}

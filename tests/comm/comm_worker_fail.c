/* comm_worker's modes of a member that goes: leave (it leaves cleanly) and
 * the failure modes (a rank killed or stopped in the middle of a
 * collective; the survivors must notice in time). */
#include "comm_worker.h"

/* ---- a member leaves cleanly ---- */

/* A descriptor that becomes readable once process pid has exited (a
 * pidfd), or -1 where the kernel has none. Open it while the process is
 * known to live: it then names that process, not a later one with its pid. */
static int pid_watch(int pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    return -1;
#endif
}

/* Whether process pid (watched by fd from pid_watch, or -1) has exited
 * within limit_ms. */
static int wait_exited(int fd, int pid, int limit_ms)
{
    double end = now_ms() + limit_ms;
    for (;;) {
        double left = end - now_ms();
        if (fd >= 0) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int r = poll(&p, 1, left > 0 ? (int)left + 1 : 0);
            if (r > 0)
                return 1;
            if (r == 0)
                return 0; /* the time left is over */
            if (errno != EINTR)
                fail("poll on a pidfd: %s", strerror(errno));
            continue;
        }
        /* no pidfd: gone, or a zombie its msrun has not reaped yet */
        char path[64], st[512] = "";
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return 1;
        size_t k = fread(st, 1, sizeof st - 1, f);
        fclose(f);
        st[k] = '\0';
        const char *rp = strrchr(st, ')');
        if (rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'))
            return 1;
        if (left <= 0)
            return 0;
        usleep(10 * 1000); /* paces the look; the deadline bounds it */
    }
}

void cw_mode_leave(msr_ctx_t *ctx, msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    if (n < 3)
        fail("leave needs 3 ranks or more");
    int *pids = xmalloc((size_t)n * sizeof *pids);
    int pid = getpid();
    OK(msr_allgather(ctx, &pid, sizeof pid, pids));
    /* rank 0 lives at least until the barrier: watched from here */
    int watch = me == 0 ? -1 : pid_watch(pids[0]);
    snprintf(g_case, sizeof g_case, "leave: barrier");
    OK(msr_comm_barrier(world));
    if (me == 0) {
        msr_comm_destroy(world);
        msr_finalize(ctx);
        printf("ok leave (rank 0 left)\n");
        fflush(stdout);
        exit(0);
    }
    /* A closing message goes to the previous rank after the ring (tag
     * 8); posted now, its receive cannot end before this rank has done its
     * part of the ring, so it is still running while this rank waits. */
    int next = me == n - 1 ? 1 : me + 1, prev = me == 1 ? n - 1 : me - 1;
    int64_t bye_in = -1, bye_out = me;
    msr_comm_req_t *bye = NULL;
    OK(msr_comm_irecv(world, &bye_in, 1, MSR_DTYPE_I64, next, 8, &bye));
    /* rank 0 exits (30 s at most: half the test's limit) */
    snprintf(g_case, sizeof g_case, "leave: rank 0 exits");
    if (!wait_exited(watch, pids[0], 30000))
        fail("rank 0 (pid %d) still runs 30 s after it left", pids[0]);
    if (watch >= 0)
        close(watch);
    free(pids);
    /* then the engine looks at its members' liveness (every 50 ms, in a
     * call that drives progress) and sees the exit: tests of the closing
     * receive for two of those periods make it look at least once */
    snprintf(g_case, sizeof g_case, "leave: rank 0's exit seen");
    double from = now_ms();
    while (now_ms() < from + 100) {
        msr_status_t ts = msr_comm_test(&bye);
        if (ts != MSR_IN_PROGRESS)
            fail("the closing receive ended early: %s", msr_status_name(ts));
        usleep(1000); /* paces the tests */
    }
    if (msr_comm_status(world) != MSR_OK)
        fail("the communicator broke when rank 0's exit was seen");
    snprintf(g_case, sizeof g_case, "leave: ring among the others");
    int64_t out = me * 1000, in = -1;
    msr_comm_req_t *req = NULL;
    OK(msr_comm_isend(world, &out, 1, MSR_DTYPE_I64, next, 7, &req));
    OK(msr_comm_recv(world, &in, 1, MSR_DTYPE_I64, prev, 7));
    OK(msr_comm_wait(req));
    if (in != prev * 1000)
        fail("got %lld from rank %d", (long long)in, prev);
    OK(msr_comm_send(world, &bye_out, 1, MSR_DTYPE_I64, prev, 8));
    OK(msr_comm_wait(bye));
    if (bye_in != next)
        fail("got closing message %lld from rank %d", (long long)bye_in, next);
    if (msr_comm_status(world) != MSR_OK)
        fail("the communicator broke when rank 0 left");
    msr_comm_destroy(world);
    msr_finalize(ctx);
    exit(0);
}

/* ---- a member that did its part and exits ---- */

/* Rank 0 arrives last at a shared-memory barrier and exits at once, without
 * destroying anything (as a program whose last call was a barrier may):
 * the others, waiting in that barrier, must see it end (MSR_OK), not fail
 * with PEER_LOST because rank 0's exit is what woke them. To make that
 * order certain, rank 0 stops the others (SIGSTOP) before it arrives, and
 * a child of rank 0 continues them once rank 0 is gone: they wake with
 * rank 0's arrival and its death both there to see. */
void cw_mode_exit_after_barrier(msr_ctx_t *ctx, msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    int *pids = xmalloc((size_t)n * sizeof *pids);
    int pid = getpid();
    snprintf(g_case, sizeof g_case, "exitafterbarrier: pids");
    OK(msr_allgather(ctx, &pid, sizeof pid, pids));
    OK(msr_comm_barrier(world));
    char key[64];
    if (me == 0) {
        for (int r = 1; r < n; r++) { /* the others are in the barrier */
            void *v = NULL;
            size_t len = 0;
            snprintf(key, sizeof key, "comm_worker/in_barrier/%d", r);
            OK(msr_store_get(ctx, key, 30000, &v, &len));
            free(v);
        }
        /* past their polls and yields: asleep in the engine's wait (a
         * rank not yet there would only make rank 0 wait for its SIGCONT) */
        usleep(200 * 1000);
        fflush(stdout);
        pid_t helper = fork();
        if (helper < 0)
            fail("fork: %s", strerror(errno));
        if (helper == 0) { /* rank 0's child: continues the others after rank 0 */
            double end = now_ms() + 30000;
            while (getppid() == pid && now_ms() < end)
                usleep(1000); /* paces the look; the deadline bounds it */
            for (int r = 1; r < n; r++)
                kill(pids[r], SIGCONT);
            _exit(0);
        }
        for (int r = 1; r < n; r++)
            if (kill(pids[r], SIGSTOP) != 0)
                fail("SIGSTOP to rank %d: %s", r, strerror(errno));
        OK(msr_comm_barrier(world));
        _exit(0);
    }
    snprintf(key, sizeof key, "comm_worker/in_barrier/%d", me);
    OK(msr_store_set(ctx, key, "1", 1));
    snprintf(g_case, sizeof g_case, "exitafterbarrier: the barrier rank 0 passed");
    msr_status_t st = msr_comm_barrier(world);
    if (st != MSR_OK)
        fail("the barrier rank 0 passed before exiting failed: %s", msr_status_name(st));
    printf("ok exitafterbarrier (rank %d)\n", me);
    fflush(stdout);
    free(pids);
    msr_comm_destroy(world);
    msr_finalize(ctx);
    exit(0);
}

/* ---- a member that gave up on its own ---- */

/* Rank 1 gives up on a receive that no send answers (its deadline passes)
 * while rank 0 is not in a call; rank 0's next call, a barrier through the
 * slots, learns it from rank 1's abort notice. Both messages are checked
 * word for word: the notice names the status alone (no culprit). Rank 1
 * exits only after rank 0 checked, so that its exit cannot be what rank 0
 * sees. */
void cw_mode_giveup(msr_ctx_t *ctx, msr_comm_t *world)
{
    int me = msr_comm_rank(world);
    char got[512];
    void *v = NULL;
    size_t len = 0;
    OK(msr_comm_barrier(world));
    if (me == 1) {
        snprintf(g_case, sizeof g_case, "giveup: rank 1's receive");
        msr_comm_set_timeout(world, 300);
        int x = 0;
        msr_status_t st = msr_comm_recv(world, &x, 1, MSR_DTYPE_I32, 0, 7);
        snprintf(got, sizeof got, "%s", msr_last_error());
        if (st != MSR_ERR_TIMEOUT || strcmp(got, "recv: deadline passed after 300 ms") != 0)
            fail("the receive ended with %s: \"%s\"", msr_status_name(st), got);
        OK(msr_store_set(ctx, "comm_worker/gaveup", "1", 1));
        OK(msr_store_get(ctx, "comm_worker/checked", 30000, &v, &len));
    } else if (me == 0) {
        snprintf(g_case, sizeof g_case, "giveup: rank 0's barrier");
        OK(msr_store_get(ctx, "comm_worker/gaveup", 30000, &v, &len));
        msr_status_t st = msr_comm_barrier(world);
        snprintf(got, sizeof got, "%s", msr_last_error());
        const char *want = "barrier(shm): a member gave up on the communicator (deadline passed)";
        if (st != MSR_ERR_TIMEOUT || strcmp(got, want) != 0)
            fail("the barrier ended with %s: \"%s\", expected MSR_ERR_TIMEOUT: \"%s\"",
                 msr_status_name(st), got, want);
        OK(msr_store_set(ctx, "comm_worker/checked", "1", 1));
        printf("ok giveup: %s\n", got);
        fflush(stdout);
    }
    free(v);
    msr_comm_destroy(world);
    msr_finalize(ctx);
    exit(0);
}

/* ---- failures ---- */

static void *killer(void *arg)
{
    int ms = *(int *)arg;
    usleep((useconds_t)ms * 1000);
    kill(getpid(), SIGKILL);
    return NULL;
}

/* The victim dies (kill) or stops answering (stop) while the others loop
 * allreduces; each survivor must fail with one of the expected statuses
 * within limit_ms of the event and can destroy the communicator. */
/* The collective a failure test repeats until it fails. */
enum { FAIL_ALLREDUCE, FAIL_REDUCE_SCATTER, FAIL_ALLGATHER, FAIL_BROADCAST, FAIL_REDUCE };

/* One call of the collective coll on world: count elements in and out
 * (reduce-scatter's input and allgather's output are the whole vector, n
 * blocks of count / n). */
static msr_status_t failure_collective(msr_comm_t *world, int coll, float *a, float *b,
                                       size_t count)
{
    size_t n = (size_t)msr_comm_size(world);
    int me = msr_comm_rank(world);
    if (coll == FAIL_REDUCE_SCATTER)
        return msr_comm_reduce_scatter(world, a, b, count / n, MSR_DTYPE_F32, MSR_OP_SUM);
    if (coll == FAIL_ALLGATHER)
        return msr_comm_allgather(world, a, b, count / n, MSR_DTYPE_F32);
    if (coll == FAIL_BROADCAST)
        return msr_comm_broadcast(world, a, count, MSR_DTYPE_F32, 0);
    if (coll == FAIL_REDUCE)
        return msr_comm_reduce(world, a, me == 0 ? b : NULL, count, MSR_DTYPE_F32, MSR_OP_SUM, 0);
    return msr_comm_allreduce(world, a, b, count, MSR_DTYPE_F32, MSR_OP_SUM);
}

/* When the stopped victim said it stopped (it stops between two
 * collectives, after its own 300 ms), from the store. */
static double stopped_at(msr_ctx_t *ctx)
{
    void *v = NULL;
    size_t len = 0;
    OK(msr_store_get(ctx, "comm_worker/stopped_at", 30000, &v, &len));
    if (len != sizeof(double))
        fail("stopped_at has %zu bytes", len);
    double at;
    memcpy(&at, v, sizeof at);
    free(v);
    return at;
}

/* algo: what the failure's message must name (the algorithm forced), or NULL */
static void mode_failure(msr_ctx_t *ctx, msr_comm_t *world, int stop, size_t count, int coll,
                         const char *algo)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    int victim = stop ? 1 : n - 1;
    /* msrun sends SIGTERM to the survivors when a worker dies: this test
     * wants to see them notice on their own. */
    signal(SIGTERM, SIG_IGN);
    int *pids = xmalloc((size_t)n * sizeof *pids);
    int pid = getpid();
    OK(msr_allgather(ctx, &pid, sizeof pid, pids));
    int64_t timeout_ms = stop ? 3000 : 30000;
    msr_comm_set_timeout(world, timeout_ms);
    /* count elements in and out: reduce-scatter's input and allgather's
     * output are the whole vector, n blocks of count / n */
    float *a = xmalloc(count * 4), *b = xmalloc(count * 4);
    for (size_t i = 0; i < count; i++)
        a[i] = 1.0f;
    OK(msr_comm_barrier(world));
    if (me == victim && !stop) {
        static int delay = 300;
        pthread_t th;
        pthread_create(&th, NULL, killer, &delay);
    }
    /* the victim's event (its SIGKILL, or that it stops answering) is
     * meant 300 ms after the barrier; a loaded machine can make it later */
    double start = now_ms(), event = start + 300;
    msr_status_t st = MSR_OK;
    long iters = 0;
    while (st == MSR_OK) {
        if (stop && me == victim && now_ms() >= event) {
            /* says when it stopped (one clock: all ranks are on this
             * machine), then stops answering: sleeps (SIGTERM ignored)
             * until killed */
            double at = now_ms();
            OK(msr_store_set(ctx, "comm_worker/stopped_at", &at, sizeof at));
            for (;;)
                pause();
        }
        st = failure_collective(world, coll, a, b, count);
        iters++;
        if (now_ms() - start > 60000)
            fail("still running after 60 s");
    }
    double failed_at = now_ms(), took = failed_at - event;
    char why[256];
    snprintf(why, sizeof why, "%s", msr_last_error());
    if (stop) /* timed from when the victim did stop, not from when it meant to */
        took = failed_at - stopped_at(ctx);
    int expected =
        stop ? (st == MSR_ERR_TIMEOUT || st == MSR_ERR_PEER_LOST) : (st == MSR_ERR_PEER_LOST);
    static const char *const names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                        "reduce"};
    if (!expected)
        fail("%s failed with %s (%s)", names[coll], msr_status_name(st), why);
    /* the failure is the forced algorithm's, or, when the operation in
     * flight had the victim's part before it died (it then ends: the
     * engine steps requests before it handles a death), the next call's
     * on the communicator that death broke */
    if (algo != NULL && strstr(why, algo) == NULL &&
        strstr(why, "the communicator is broken (peer lost)") == NULL)
        fail("the failure is not %s's: %s", algo, why);
    /* from the victim's event (stop: from when it did stop), the
     * communicator's timeout (a kill is noticed long before it), and 2 s
     * for the deadline's check and the aborts to reach every survivor on a
     * loaded machine */
    double limit = (double)timeout_ms + 2000;
    if (took > limit)
        fail("noticed after %.0f ms, limit %.0f ms", took, limit);
    if (msr_comm_status(world) == MSR_OK)
        fail("the communicator is not marked broken");
    msr_status_t again = msr_comm_barrier(world);
    if (again == MSR_OK)
        fail("a broken communicator still works");
    msr_comm_destroy(world);
    printf("rank %d survived: %s after %.0f ms (%ld %s calls): %s\n", me, msr_status_name(st), took,
           iters, names[coll], why);
    fflush(stdout);
    if (stop && me == 0)
        kill(pids[victim], SIGKILL); /* the stopped rank would wait forever */
    free(pids);
    free(a);
    free(b);
    msr_finalize(ctx);
    exit(0);
}

/* Runs a failure mode (a rank killed or stopped mid-collective; does not
 * return); 0 when mode is not one. */
int cw_run_failure_mode(msr_ctx_t *ctx, msr_comm_t *world, const char *mode)
{
    if (strcmp(mode, "kill") == 0 || strcmp(mode, "killring") == 0 ||
        strcmp(mode, "killhier") == 0) /* 1 MiB */
        mode_failure(ctx, world, 0, 1 << 18, FAIL_ALLREDUCE,
                     strcmp(mode, "killhier") == 0 ? "allreduce(hier)" : NULL);
    else if (strcmp(mode, "killhierrs") == 0)
        mode_failure(ctx, world, 0, 1 << 18, FAIL_REDUCE_SCATTER, "reduce_scatter(hier)");
    else if (strcmp(mode, "killhierag") == 0)
        mode_failure(ctx, world, 0, 1 << 18, FAIL_ALLGATHER, "allgather(hier)");
    else if (strcmp(mode, "killhierbc") == 0)
        mode_failure(ctx, world, 0, 1 << 18, FAIL_BROADCAST, "broadcast(hier)");
    else if (strcmp(mode, "killhierred") == 0)
        mode_failure(ctx, world, 0, 1 << 18, FAIL_REDUCE, "reduce(hier)");
    else if (strcmp(mode, "killsmall") == 0) /* 8 bytes: shared memory on one node */
        mode_failure(ctx, world, 0, 2, FAIL_ALLREDUCE, NULL);
    else if (strcmp(mode, "killsmallbc") == 0) /* the slots of the other collectives */
        mode_failure(ctx, world, 0, 2, FAIL_BROADCAST, "broadcast(shm)");
    else if (strcmp(mode, "killsmallbcauto") == 0) /* the slots, crowded or not */
        mode_failure(ctx, world, 0, 2, FAIL_BROADCAST, "broadcast(shm)");
    else if (strcmp(mode, "killsmallag") == 0)
        mode_failure(ctx, world, 0, 64, FAIL_ALLGATHER, "allgather(shm)");
    else if (strcmp(mode, "killsmallrs") == 0)
        mode_failure(ctx, world, 0, 64, FAIL_REDUCE_SCATTER, "reduce_scatter(shm)");
    else if (strcmp(mode, "killlined") == 0) /* 2 KiB: lined in a group of two */
        mode_failure(ctx, world, 0, 512, FAIL_ALLREDUCE, "allreduce(shm)");
    else if (strcmp(mode, "stoplined") == 0)
        mode_failure(ctx, world, 1, 512, FAIL_ALLREDUCE, NULL);
    else if (strcmp(mode, "stop") == 0)
        mode_failure(ctx, world, 1, 1 << 18, FAIL_ALLREDUCE, NULL);
    else if (strcmp(mode, "stopsmall") == 0) /* the slots: a peer that stops answering */
        mode_failure(ctx, world, 1, 2, FAIL_ALLREDUCE, NULL);
    else
        return 0;
    return 1;
}

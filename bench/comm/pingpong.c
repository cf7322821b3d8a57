/* The shared-memory limit of a small collective: two processes, each pinned
 * to its own CPU, bounce one cache line. Prints one line:
 *   pingpong cpus=0,1 iters=200000 runs=7 roundtrip_ns best=.. median=..
 *            oneway_ns best=.. median=.. exchange_ns best=.. median=..
 * roundtrip: A writes the line, B sees it and writes it back, A sees that;
 * oneway is half of it. exchange: both write their own line at once and
 * wait for the other's (what an allreduce of 2 ranks needs at least: one
 * cache-line transfer each way, overlapped), per exchange. best and median
 * are over runs of iters each. A CPU that cannot be had (fewer CPUs than
 * asked) is said in the line (pinned=no): the figure is then the
 * scheduler's, not the caches'.
 * --bytes B bounces B bytes instead of one line: L = B/64 lines rounded up
 * (1 to MAX_LINES), each written whole by one side and read by the other,
 * then back (round trip), or both sides' L lines at once (exchange): the
 * bound of a collective that moves B bytes each way, since 16-64 lines cost
 * more than one. The line says bytes=B lines=L.
 * Usage: pingpong [--cpus A,B] [--iters N] [--runs R] [--bytes B] */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ volatile("yield")
#else
#define cpu_relax() ((void)0)
#endif

#define LINE      64
#define MAX_RUNS  64
#define MAX_LINES 1024 /* 64 KiB */
#define WORDS     (LINE / sizeof(uint64_t))

typedef struct line {
    _Alignas(LINE) _Atomic uint64_t w[WORDS];
} line_t;

/* The bounced lines, each side's exchange lines, and the go flag each run
 * starts from, each on lines of their own. */
typedef struct shared {
    line_t ball[MAX_LINES];
    line_t xch[2][MAX_LINES];
    line_t go;
} shared_t;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0;
}

static void wait_for(_Atomic uint64_t *w, uint64_t v)
{
    while (atomic_load_explicit(w, memory_order_acquire) < v)
        cpu_relax();
}

/* Writes every word of lines[0..n) with v: a whole line moves, as data does */
static void put_lines(line_t *lines, int n, uint64_t v)
{
    for (int l = 0; l < n; l++) {
        for (size_t k = 1; k < WORDS; k++)
            atomic_store_explicit(&lines[l].w[k], v, memory_order_relaxed);
        atomic_store_explicit(&lines[l].w[0], v, memory_order_release);
    }
}

/* Waits until every line of lines[0..n) carries v, reading each whole */
static volatile uint64_t sink;
static void get_lines(line_t *lines, int n, uint64_t v)
{
    uint64_t sum = 0;
    for (int l = 0; l < n; l++) {
        wait_for(&lines[l].w[0], v);
        for (size_t k = 1; k < WORDS; k++)
            sum += atomic_load_explicit(&lines[l].w[k], memory_order_relaxed);
    }
    sink = sum;
}

/* Run r of both kinds on side me (0: the timer, 1: the echo) over n
 * lines; the values grow over the whole life so that no run waits on a
 * stale one. Returns the time per round trip and per exchange on side 0. */
static void run_once(shared_t *s, int me, int n, long iters, uint64_t base, double *rt, double *ex)
{
    line_t *ball = s->ball, *mine = s->xch[me], *theirs = s->xch[1 - me];
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        uint64_t v = base + 2 * (uint64_t)i;
        if (me == 0) {
            put_lines(ball, n, v + 1);
            get_lines(ball, n, v + 2);
        } else {
            get_lines(ball, n, v + 1);
            put_lines(ball, n, v + 2);
        }
    }
    double t1 = now_ns();
    for (long i = 0; i < iters; i++) {
        uint64_t v = base / 2 + (uint64_t)i + 1;
        put_lines(mine, n, v);
        get_lines(theirs, n, v);
    }
    double t2 = now_ns();
    *rt = (t1 - t0) / (double)iters;
    *ex = (t2 - t1) / (double)iters;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int usage(void)
{
    fprintf(stderr,
            "usage: pingpong [--cpus A,B] [--iters N] [--runs R (1-%d)] [--bytes B (1-%d)]\n",
            MAX_RUNS, MAX_LINES * LINE);
    return 2;
}

int main(int argc, char **argv)
{
    int cpu[2] = {0, 1};
    long iters = 200000;
    int runs = 7;
    long bytes = LINE;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--cpus") == 0 && i + 1 < argc &&
            sscanf(argv[i + 1], "%d,%d", &cpu[0], &cpu[1]) == 2) {
            i++;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            runs = (int)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc) {
            char *end;
            bytes = strtol(argv[++i], &end, 10);
            if (*argv[i] == '\0' || *end != '\0')
                return usage();
        } else {
            return usage();
        }
    }
    if (iters < 1 || runs < 1 || runs > MAX_RUNS || bytes < 1 || bytes > (long)MAX_LINES * LINE)
        return usage();
    int nlines = (int)((bytes + LINE - 1) / LINE);
    shared_t *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("pingpong: mmap");
        return 1;
    }
    memset(s, 0, sizeof *s);
    pid_t child = fork();
    if (child < 0) {
        perror("pingpong: fork");
        return 1;
    }
    int me = child == 0 ? 1 : 0;
    int pinned = pin(cpu[me]);
    double rt[MAX_RUNS], ex[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        /* both sides start each run together: side 0 raises go to 2r+1,
         * side 1 answers 2r+2 */
        _Atomic uint64_t *go = &s->go.w[0];
        if (me == 0) {
            atomic_store(go, 2 * (uint64_t)r + 1);
            wait_for(go, 2 * (uint64_t)r + 2);
        } else {
            wait_for(go, 2 * (uint64_t)r + 1);
            atomic_store(go, 2 * (uint64_t)r + 2);
        }
        run_once(s, me, nlines, iters, 2 * (uint64_t)r * (uint64_t)iters, &rt[r], &ex[r]);
    }
    if (me == 1)
        _exit(pinned ? 0 : 3);
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) {
        fprintf(stderr, "pingpong: the echo process failed\n");
        return 1;
    }
    pinned = pinned && WEXITSTATUS(status) == 0;
    qsort(rt, (size_t)runs, sizeof rt[0], cmp_d);
    qsort(ex, (size_t)runs, sizeof ex[0], cmp_d);
    double rt_med = rt[runs / 2], ex_med = ex[runs / 2];
    printf("pingpong cpus=%d,%d pinned=%s bytes=%ld lines=%d iters=%ld runs=%d roundtrip_ns "
           "best=%.1f median=%.1f oneway_ns best=%.1f median=%.1f exchange_ns best=%.1f "
           "median=%.1f\n",
           cpu[0], cpu[1], pinned ? "yes" : "no", bytes, nlines, iters, runs, rt[0], rt_med,
           rt[0] / 2, rt_med / 2, ex[0], ex_med);
    return 0;
}

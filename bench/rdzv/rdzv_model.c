/* rdzv_scale --model_relay: the runs' measurements kept, the
 * coordinator's costs fitted to the direct and the relayed ones, and the
 * modelled time of a join from 1K to 1M ranks printed beside what was
 * measured here. */
#include <stdio.h>
#include <stdlib.h>

#include "rdzv_scale_impl.h"

#define MEASURED_MAX 32
static measured_t runs[MEASURED_MAX];
static int nruns;

void rdzv_model_record(const measured_t *m)
{
    if (nruns < MEASURED_MAX)
        runs[nruns++] = *m;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median over the runs with (relay != 0) == relayed, through one level
 * at most, of what get reads. */
static double median_of(int relayed, double (*get)(const measured_t *m))
{
    double v[MEASURED_MAX];
    int n = 0;
    for (int i = 0; i < nruns; i++)
        if ((runs[i].relay != 0) == relayed && runs[i].levels <= 1)
            v[n++] = get(&runs[i]);
    if (n == 0)
        return -1;
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double get_connect(const measured_t *m)
{
    return m->connect_us;
}

static double get_join(const measured_t *m)
{
    return m->join_us;
}

/* The wall time (connect + join) measured here for nodes through levels
 * of relays of fan-in relay (0: direct); -1 when not run. */
static double measured_ms(int nodes, int relay, int levels)
{
    for (int i = 0; i < nruns; i++)
        if (runs[i].nodes == nodes && runs[i].relay == relay &&
            (relay == 0 || runs[i].levels == levels))
            return runs[i].total_ms;
    return -1;
}

/* The modelled time of a join of nodes through levels of relays of
 * fan-in F (costs in us, fitted; see rdzv_print_model). Every relay of a
 * level works in parallel with its siblings, so the critical path is one
 * relay of each level, full: its connections, and per round its calls
 * (c_call each), the entries of its batches (a relay above the first
 * checks and repacks each entry, c_entry), then the coordinator's calls
 * and entries, and a round trip per hop. */
static double model_s(int nodes, int F, int levels, double c_conn, double c_call, double c_entry,
                      double rtt_us)
{
    double conn = 0, work = 0;
    int below = nodes;  /* relays (or nodes) of the level below */
    long long span = 1; /* nodes under one relay of the level below */
    for (int l = 1; l <= levels; l++) {
        int fan = below < F ? below : F;
        conn += fan * c_conn;
        work += fan * c_call + (l > 1 ? (double)fan * span * c_entry : 0);
        if ((long long)fan * span < nodes)
            span *= fan;
        below = (below + F - 1) / F;
    }
    conn += below * c_conn;
    work += below * c_call + nodes * c_entry;
    double round = (work + (levels + 1) * rtt_us) / 1e6;
    return conn / 1e6 + 2 * round;
}

/* The critical path of a join on separate machines (docs/performance.md,
 * "Rendezvous at scale"), fitted to this invocation's runs. Per node the
 * coordinator spends c_conn on a connection (and its first call) and
 * c_call on each further call when nodes call it directly; through relays
 * it spends c_call per batch and c_entry per entry. A relay is a server
 * like the coordinator: its F nodes cost it F * c_conn to connect and
 * F * c_call per round, and a relay of a higher level c_entry per entry
 * of its lower relays' batches too. Two rounds (the joins, the ready
 * heartbeats), each crossing levels + 1 hops of rtt_us; the relays of a
 * level work in parallel, the coordinator alone. */
void rdzv_print_model(int ranks, int relay, int levels, double rtt_us)
{
    double c_conn = median_of(0, get_connect), c_call = median_of(0, get_join) / 2,
           relay_join = median_of(1, get_join);
    if (c_conn < 0 || relay_join < 0 || relay == 0) {
        printf("model: needs a direct run and a --relay run in one invocation (--model_relay F)\n");
        return;
    }
    int fit_relay = 0;
    for (int i = 0; i < nruns; i++)
        if (runs[i].relay)
            fit_relay = runs[i].relay;
    double c_entry = relay_join / 2 - c_call / fit_relay;
    if (c_entry < 0.5)
        c_entry = 0.5;
    printf("model: c_conn=%.0f us c_call=%.0f us c_entry=%.1f us (coordinator CPU, fitted here); "
           "rtt=%.0f us (assumed); relays of %d nodes, one level and %d\n",
           c_conn, c_call, c_entry, rtt_us, relay, levels);
    printf("%-9s %-8s %-8s | %-13s %-13s %-13s | %-14s %-14s %-14s\n", "ranks", "nodes", "relays",
           "here_direct_s", "here_relay_s", "here_levels_s", "model_direct_s", "model_relay_s",
           "model_levels_s");
    static const int world[] = {1024, 8192, 32768, 100000, 1000000};
    for (size_t i = 0; i < sizeof world / sizeof world[0]; i++) {
        int nodes = world[i] / ranks, F = nodes < relay ? nodes : relay;
        int nrel = (nodes + F - 1) / F;
        double direct = nodes * (c_conn + 2 * c_call) / 1e6;
        double here[3] = {measured_ms(nodes, 0, 0), measured_ms(nodes, relay, 1),
                          measured_ms(nodes, relay, levels)};
        char hs[3][16];
        for (int k = 0; k < 3; k++) {
            snprintf(hs[k], sizeof hs[k], "-");
            if (here[k] >= 0)
                snprintf(hs[k], sizeof hs[k], "%.2f", here[k] / 1000);
        }
        printf("%-9d %-8d %-8d | %-13s %-13s %-13s | %-14.2f %-14.2f %-14.2f\n", world[i], nodes,
               nrel, hs[0], hs[1], levels > 1 ? hs[2] : "-", direct,
               model_s(nodes, relay, 1, c_conn, c_call, c_entry, rtt_us),
               model_s(nodes, relay, levels, c_conn, c_call, c_entry, rtt_us));
    }
}

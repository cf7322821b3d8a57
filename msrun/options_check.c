/* msrun's options checked against each other once all are known, the
 * program found before any worker starts, and the output options (which
 * ranks reach the terminal, which streams go to log files). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/util.h"
#include "launcher/jobdir.h"
#include "launcher/options.h"
#include "launcher/options_impl.h"
#include "launcher/relays.h"
#include "launcher/workers.h"

/* Finds prog the way execvp would into *out_p, so a missing program is
 * refused before any worker starts; what names it in messages, flag is the
 * boolean flag given alone just before prog (or NULL), for the hint. */
static int find_program(const char *prog, const char *what, const char *flag, char **out_p)
{
    char path[PATH_MAX];
    struct stat sb;
    if (strchr(prog, '/')) {
        if (stat(prog, &sb) != 0) {
            msr_options_error("%s '%s' does not exist", what, prog);
            return -1;
        }
        if (S_ISDIR(sb.st_mode)) {
            msr_options_error("%s '%s' is a directory", what, prog);
            return -1;
        }
        if (access(prog, X_OK) != 0) {
            msr_options_error("%s '%s' is not executable: %s", what, prog, strerror(errno));
            return -1;
        }
        return msr_options_set_string(out_p, prog);
    }
    const char *env = getenv("PATH");
    const char *dirs = env && *env ? env : "/usr/local/bin:/usr/bin:/bin";
    int found_noexec = 0;
    for (const char *p = dirs; *p;) {
        const char *end = strchr(p, ':');
        size_t dl = end ? (size_t)(end - p) : strlen(p);
        int n = snprintf(path, sizeof path, "%.*s%s%s", (int)dl, p, dl ? "/" : "", prog);
        if (n > 0 && (size_t)n < sizeof path && stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
            if (access(path, X_OK) == 0)
                return msr_options_set_string(out_p, path);
            found_noexec = 1;
        }
        p = end ? end + 1 : p + dl;
    }
    int b;
    if (found_noexec)
        msr_options_error("%s '%s' was found in PATH but is not executable", what, prog);
    else if (flag && msr_parse_bool(prog, &b) == MSR_OK)
        /* "--bind_core True": the flag ended, True is taken as the program */
        msr_options_error(
            "%s '%s' not found in PATH (a flag takes a value only after '=', e.g. %s=%s)", what,
            prog, flag, prog);
    else
        msr_options_error("%s '%s' not found in PATH", what, prog);
    return -1;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

/* What runs: PROGRAM itself, or for a Python program (PROGRAM.py, or -m
 * MODULE) the interpreter with PROGRAM (after -m) in front of the
 * arguments, as MindSpore's msrun and torchrun run them. flag: as for
 * find_program. */
static int resolve_program(msr_options_t *o, const char *flag)
{
    const char *prog = o->program;
    if (o->module && o->no_python) {
        msr_options_error("-m runs a module with Python: it cannot go with --no_python");
        return -1;
    }
    int python = o->module || (!o->no_python && ends_with(prog, ".py"));
    if (!python)
        return find_program(prog, "program", flag, &o->program_path);
    struct stat sb;
    if (!o->module && stat(prog, &sb) != 0) {
        msr_options_error("program '%s' does not exist", prog);
        return -1;
    }
    if (find_program(o->python ? o->python : "python3", "Python interpreter", NULL,
                     &o->program_path) != 0)
        return -1;
    /* python [-m] PROGRAM ARGS...: o->argv points into the command line */
    char **argv = msr_calloc((size_t)o->argc + 3, sizeof *argv);
    if (argv == NULL) {
        msr_options_error("out of memory");
        return -1;
    }
    int k = 0;
    argv[k++] = o->program_path;
    if (o->module)
        argv[k++] = "-m";
    for (int i = 0; i < o->argc; i++)
        argv[k++] = o->argv[i];
    argv[k] = NULL;
    msr_free(o->argv);
    o->argv = argv;
    o->argc = k;
    return 0;
}

static int parse_rank_list(const char *s, int rank, int *valid, long *top_p)
{
    /* Returns whether rank is in the list; *valid tells if the list parsed,
     * *top_p (may be NULL) its largest rank. */
    int in = 0;
    *valid = 1;
    if (top_p)
        *top_p = -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10);
        if (end == p || a < 0 || errno) {
            *valid = 0;
            return 0;
        }
        long b = a;
        p = end;
        if (*p == '-') {
            p++;
            b = strtol(p, &end, 10);
            if (end == p || b < a || errno) {
                *valid = 0;
                return 0;
            }
            p = end;
        }
        if (rank >= a && rank <= b)
            in = 1;
        if (top_p && b > *top_p)
            *top_p = b;
        if (*p == ',')
            p++;
        else if (*p != '\0') {
            *valid = 0;
            return 0;
        }
    }
    return in;
}

int msr_options_show_rank(const msr_options_t *o, int rank, int local_rank)
{
    int valid;
    if (o->local_ranks_filter && !parse_rank_list(o->local_ranks_filter, local_rank, &valid, NULL))
        return 0;
    if (o->tail_worker_log && strcmp(o->tail_worker_log, "-1") != 0 &&
        !parse_rank_list(o->tail_worker_log, rank, &valid, NULL))
        return 0;
    if (o->show_ranks == NULL || strcmp(o->show_ranks, "all") == 0)
        return 1;
    return parse_rank_list(o->show_ranks, rank, &valid, NULL);
}

/* A --tee or --redirects value (torchrun's): "N" for every worker, or
 * "L:N,L:N..." per local rank (others 0), N in 0..3. *value_p gets
 * local_rank's, *top_p (may be NULL) the largest local rank named. Returns
 * 0, or -1 if s is malformed. */
static int parse_std_spec(const char *s, int local_rank, int *value_p, long *top_p)
{
    *value_p = 0;
    if (top_p)
        *top_p = -1;
    if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0') {
        *value_p = s[0] - '0';
        return 0;
    }
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long l = strtol(p, &end, 10);
        if (end == p || l < 0 || errno || *end != ':' || end[1] < '0' || end[1] > '3' ||
            (end[2] != ',' && end[2] != '\0') || (end[2] == ',' && end[3] == '\0'))
            return -1;
        if (l == local_rank)
            *value_p = end[1] - '0';
        if (top_p && l > *top_p)
            *top_p = l;
        p = end + 2;
        if (*p == ',')
            p++;
    }
    return 0;
}

void msr_options_streams(const msr_options_t *o, int local_rank, int *file_p, int *off_p)
{
    int tee = 0, redir = 0;
    *file_p = *off_p = 0;
    if (o->log_dir == NULL)
        return;
    if (o->tee == NULL && o->redirects == NULL) {
        *file_p = MSR_STD_OUT | MSR_STD_ERR;
        return;
    }
    if (o->tee)
        parse_std_spec(o->tee, local_rank, &tee, NULL);
    if (o->redirects)
        parse_std_spec(o->redirects, local_rank, &redir, NULL);
    *file_p = tee | redir;
    *off_p = redir & ~tee;
}

/* Checks --tee and --redirects (name) against the node's workers. */
static int check_std_spec(const msr_options_t *o, const char *name, const char *value)
{
    int v;
    long top;
    if (value == NULL)
        return 0;
    if (parse_std_spec(value, 0, &v, &top) != 0) {
        msr_options_error(
            "--%s=%s: give 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local "
            "rank like 0:3,1:1",
            name, value);
        return -1;
    }
    if (top >= o->local_worker_num) {
        msr_options_error("--%s=%s: local rank %ld is out of range (this node has %d worker%s)",
                          name, value, top, o->local_worker_num,
                          o->local_worker_num == 1 ? "" : "s");
        return -1;
    }
    if (o->log_dir == NULL) {
        msr_options_error(
            "--%s needs --log_dir: the streams it names are written to log files there", name);
        return -1;
    }
    return 0;
}

/* Checks a list of global ranks (--show_ranks, --tail_worker_log). */
static int check_rank_list(const msr_options_t *o, const char *name, const char *list)
{
    int valid;
    long top;
    parse_rank_list(list, 0, &valid, &top);
    if (!valid) {
        msr_options_error("--%s=%s is not a list like 0,2-3", name, list);
        return -1;
    }
    /* the most ranks the job can have (an elastic job at its largest) */
    long world = o->worker_num;
    if (o->max_nodes > 0 && (long)o->max_nodes * o->local_worker_num > world)
        world = (long)o->max_nodes * o->local_worker_num;
    if (top >= world) {
        msr_options_error("--%s=%s: rank %ld is out of range (the job has %ld rank%s)", name, list,
                          top, world, world == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

/* --local_ranks_filter: local ranks of this node's workers. */
static int check_local_list(const msr_options_t *o)
{
    int valid;
    long top;
    parse_rank_list(o->local_ranks_filter, 0, &valid, &top);
    if (!valid) {
        msr_options_error("--local_ranks_filter=%s is not a list like 0,2-3",
                          o->local_ranks_filter);
        return -1;
    }
    if (top >= o->local_worker_num) {
        msr_options_error("--local_ranks_filter=%s: local rank %ld is out of range (this node has "
                          "%d worker%s)",
                          o->local_ranks_filter, top, o->local_worker_num,
                          o->local_worker_num == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

/* The output and log options. */
static int check_output(const msr_options_t *o)
{
    if (o->show_ranks && strcmp(o->show_ranks, "all") != 0 &&
        check_rank_list(o, "show_ranks", o->show_ranks) != 0)
        return -1;
    if (o->tail_worker_log && strcmp(o->tail_worker_log, "-1") != 0 &&
        check_rank_list(o, "tail_worker_log", o->tail_worker_log) != 0)
        return -1;
    if (check_std_spec(o, "redirects", o->redirects) != 0 || check_std_spec(o, "tee", o->tee) != 0)
        return -1;
    if (o->local_ranks_filter && check_local_list(o) != 0)
        return -1;
    if (o->log_max_bytes != 0 && o->log_max_bytes < MSR_LOG_MAX_BYTES_MIN) {
        msr_options_error("--log_max_bytes %lld is below %d bytes (0: no limit)",
                          (long long)o->log_max_bytes, MSR_LOG_MAX_BYTES_MIN);
        return -1;
    }
    char name[256];
    if (o->worker_log_name && msr_log_name_format(o->worker_log_name, 0, 0, 0, "127.0.0.1", name,
                                                  sizeof name) != MSR_OK) {
        msr_options_error("%s", msr_err_msg());
        return -1;
    }
    return 0;
}

/* --straggler_factor: a number above 1 (and sane). */
static int check_straggler_factor(const msr_options_t *o)
{
    if (o->straggler_factor == NULL)
        return 0;
    char *end;
    double x = strtod(o->straggler_factor, &end);
    if (*end != '\0' || !(x > 1 && x <= 1000)) {
        msr_options_error("--straggler_factor=%s is not a number above 1 (up to 1000)",
                          o->straggler_factor);
        return 2;
    }
    return 0;
}

/* --relay names HOST:PORT with a port of 1..65535: a bad one is the
 * user's input, not a relay that does not answer. 0, or 2 with a message. */
static int check_relay_target(const msr_options_t *o)
{
    char *host = NULL;
    int port = 0;
    if (o->relay == NULL)
        return 0;
    if (msr_opts_hostport(o->relay, "--relay", 1, 65535, &host, &port) != MSR_OK) {
        msr_options_error("%s", msr_err_msg());
        return 2;
    }
    msr_free(host);
    return 0;
}

/* --ps_servers (docs/ps.md): at least one worker must be left, in the
 * smallest world an elastic job may form too. */
static int check_ps_servers(const msr_options_t *o)
{
    long world = o->worker_num;
    if (o->min_nodes > 0 && (long)o->min_nodes * o->local_worker_num < world)
        world = (long)o->min_nodes * o->local_worker_num;
    if (o->ps_staleness != -1 && o->ps_servers == 0) {
        msr_options_error("--ps_staleness=%d needs --ps_servers (it is the servers' mode)",
                          o->ps_staleness);
        return -1;
    }
    if (o->ps_servers > 0 && o->ps_servers >= world) {
        msr_options_error("--ps_servers=%d leaves no worker: it must be below the world size "
                          "(%ld rank%s%s)",
                          o->ps_servers, world, world == 1 ? "" : "s",
                          o->min_nodes > 0 ? " at the fewest nodes" : "");
        return -1;
    }
    return 0;
}

int msr_options_check_rest(msr_options_t *o, const char *flag)
{
    if (check_straggler_factor(o) != 0)
        return 2;
    /* an IPv6 address may come in brackets, as in a URL: [::1] */
    size_t alen = o->master_addr ? strlen(o->master_addr) : 0;
    if (alen >= 2 && o->master_addr[0] == '[' && o->master_addr[alen - 1] == ']') {
        memmove(o->master_addr, o->master_addr + 1, alen - 2);
        o->master_addr[alen - 2] = '\0';
    }
    if (o->master_addr && o->master_addr[0] == '\0') {
        msr_options_error("--master_addr is empty");
        return 2;
    }
    if (o->master_addr && o->master_port == 0) {
        msr_options_error("master_port 0 is only valid for a standalone job");
        return 2;
    }
    if (check_output(o) != 0)
        return 2;
    if (!o->join) {
        msr_options_error(
            "--join=false (exit once the workers are started) is not supported: msrun "
            "stays and supervises its workers");
        return 2;
    }
    if (o->node_timeout_ms <= o->heartbeat_ms) {
        msr_options_error("node_timeout (%.1f s) must be longer than heartbeat_interval (%.1f s)",
                          (double)o->node_timeout_ms / 1000, (double)o->heartbeat_ms / 1000);
        return 2;
    }
    if ((o->tls_cert == NULL) != (o->tls_key == NULL)) {
        msr_options_error("--tls_cert and --tls_key go together (only --%s given)",
                          o->tls_cert ? "tls_cert" : "tls_key");
        return 2;
    }
    if (o->tls_server_name && !o->tls_cert && !o->tls_ca) {
        msr_options_error(
            "--tls_server_name needs TLS: give --tls_ca (or --tls_cert and --tls_key)");
        return 2;
    }
    if (check_ps_servers(o) != 0)
        return 2;
    if (check_relay_target(o) != 0)
        return 2;
    msr_relays_plan_t plan;
    if (msr_relays_plan(o, &plan) != 0)
        return 2;
    if (resolve_program(o, flag) != 0)
        return 2;
    return 0;
}

int msr_options_find_program(const char *prog, const char *what, const char *flag, char **out_p)
{
    return find_program(prog, what, flag, out_p);
}

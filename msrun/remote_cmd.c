/* The --hostfile/--host launcher's commands: what each remote msrun is
 * given (msrun's own arguments less the launcher's, the job's settings for
 * its host, --forward_env's variables), quoted for the remote shell, and
 * ssh's argv around it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/status.h"
#include "base/util.h"
#include "launcher/options_impl.h"
#include "launcher/relays.h"
#include "launcher/remote_impl.h"

/* ---- what the remote msruns are given ---- */

/* Options of the launcher only, or that it sets for each host itself. */
static const char *const own_opts[] = {
    "hostfile",   "host",   "ssh",        "forward_env", "exit_on_stdin_eof",
    "worker_num", "token",  "token_file", "job_id",      "master_port",
    "dry_run",    "relays", NULL};
/* Options that contradict a job of the hosts listed. */
static const char *const refused_opts[] = {
    "local_worker_num", "node_rank",        "nnodes",       "master_addr", "rdzv_endpoint",
    "standalone",       "coordinator_here", "rdzv_backend", "relays_host", NULL};

static int in_list(const char *const *list, const char *name)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], name) == 0)
            return 1;
    return 0;
}

/* Keeps in l->fwd msrun's arguments but the launcher's own; refuses those
 * that contradict the host list. argv: msrun's arguments, parsed. */
int msr_remote_split_args(remote_launch_t *l, int argc, char **argv)
{
    l->fwd = msr_calloc((size_t)argc + 1, sizeof *l->fwd);
    if (l->fwd == NULL) {
        msr_options_error("out of memory");
        return -1;
    }
    int i = 0;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] != '\0' && strcmp(argv[i], "--") != 0; i++) {
        const char *a = argv[i];
        const char *name = a + (a[1] == '-' ? 2 : 1);
        size_t n = strcspn(name, "=");
        char canon[64];
        int k = -1;
        if (n < sizeof canon) {
            memcpy(canon, name, n);
            canon[n] = '\0';
            k = msr_opts_find(&msr_options_set, canon);
        }
        if (k < 0) /* parsed already: not reached */
            break;
        const msr_opt_t *d = &msr_options_set.opts[k];
        int words = name[n] == '=' || d->kind == MSR_OPT_BOOL ? 1 : 2;
        if (in_list(refused_opts, d->name)) {
            msr_options_error("--%s cannot be given with --hostfile/--host: msrun sets it for "
                              "each host",
                              d->name);
            return -1;
        }
        if (!in_list(own_opts, d->name))
            for (int w = 0; w < words && i + w < argc; w++)
                l->fwd[l->nfwd++] = argv[i + w];
        i += words - 1;
    }
    for (; i < argc; i++) /* "--", the program and its arguments */
        l->fwd[l->nfwd++] = argv[i];
    return 0;
}

/* Appends s to b quoted for a POSIX shell: '...', a ' as '\''. */
static msr_status_t append_quoted(msr_buf_t *b, const char *s)
{
    msr_status_t st = msr_buf_append(b, "'", 1);
    for (const char *p = s; st == MSR_OK && *p; p++)
        st = *p == '\'' ? msr_buf_append(b, "'\\''", 4) : msr_buf_append(b, p, 1);
    return st == MSR_OK ? msr_buf_append(b, "' ", 2) : st;
}

/* Appends "NAME=value" for each variable of --forward_env that is set. */
static msr_status_t append_env(msr_buf_t *b, const char *list)
{
    msr_status_t st = MSR_OK;
    char name[256];
    for (const char *p = list; st == MSR_OK && *p;) {
        size_t n = strcspn(p, ",");
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), p);
        const char *v = n && n < sizeof name ? getenv(name) : NULL;
        if (v) {
            st = msr_buf_printf(b, "'%s=", name);
            for (const char *c = v; st == MSR_OK && *c; c++)
                st = *c == '\'' ? msr_buf_append(b, "'\\''", 4) : msr_buf_append(b, c, 1);
            if (st == MSR_OK)
                st = msr_buf_append(b, "' ", 2);
        }
        p += n + (p[n] == ',');
    }
    return st;
}

/* Checks --forward_env: names of variables, comma-separated. */
int msr_remote_check_forward_env(const char *list)
{
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        int ok = n > 0 && n < 256 && !(p[0] >= '0' && p[0] <= '9');
        for (size_t i = 0; i < n && ok; i++)
            ok = (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= 'a' && p[i] <= 'z') ||
                 (p[i] >= '0' && p[i] <= '9') || p[i] == '_';
        if (!ok) {
            msr_options_error("--forward_env: '%.*s' is not a variable's name (a comma-separated "
                              "list of names, e.g. PATH,HF_HOME)",
                              (int)(n > 256 ? 256 : n), p);
            return -1;
        }
        if ((n == 11 && strncmp(p, "MSRUN_TOKEN", n) == 0) ||
            (n == 9 && strncmp(p, "MSR_TOKEN", n) == 0)) {
            msr_options_error("--forward_env: %.*s would put the job token on the remote command "
                              "line; msrun passes the token itself",
                              (int)n, p);
            return -1;
        }
        p += n + (p[n] == ',');
    }
    return 0;
}

int msr_remote_relays(remote_launch_t *l)
{
    const msr_options_t *o = l->o;
    int k = msr_relays_k(o->relays, l->nprocs);
    l->relays_why = msr_relays_job_why(o, k);
    l->relays_k = l->relays_why ? 0 : k;
    long last = l->relays_k ? msr_relays_port(o, (l->nprocs - 1) / l->relays_k) : 0;
    if (last > 65535) {
        msr_options_error("--relays %d: the relay of node %d's group would listen on port %ld "
                          "(master_port + 2 + its group %d), past 65535; give a larger --relays "
                          "or a lower --master_port",
                          k, l->nprocs - 1, last, (l->nprocs - 1) / k);
        return -1;
    }
    return 0;
}

const char *msr_remote_host_addr(const remote_launch_t *l, int i)
{
    const char *name = l->procs[i].host->name;
    const char *at = strrchr(name, '@'); /* user@host: the host part */
    return at ? at + 1 : name;
}

/* --relays for host i's msrun: K and its group's host, or off */
static msr_status_t append_relays(const remote_launch_t *l, int i, msr_buf_t *b)
{
    if (l->relays_k == 0)
        return msr_buf_printf(b, "--relays=off ");
    msr_status_t st = msr_buf_printf(b, "--relays=%d --relays_host=", l->relays_k);
    return st == MSR_OK ? append_quoted(b, msr_remote_host_addr(l, i / l->relays_k * l->relays_k))
                        : st;
}

/* The shell command that runs host i's msrun, into b. */
static msr_status_t remote_command(const remote_launch_t *l, int i, msr_buf_t *b)
{
    const remote_proc_t *p = &l->procs[i];
    msr_status_t st = msr_buf_append(b, "cd ", 3);
    if (st == MSR_OK)
        st = append_quoted(b, l->cwd);
    if (st == MSR_OK)
        st = msr_buf_printf(b, "&& exec env ");
    if (st == MSR_OK && l->o->forward_env)
        st = append_env(b, l->o->forward_env);
    if (st == MSR_OK)
        st = append_quoted(b, l->self);
    if (st == MSR_OK)
        st = msr_buf_printf(b,
                            "--node_rank=%d --nnodes=%d --worker_num=%d --local_worker_num=%d "
                            "--master_port=%d --coordinator_here=%s --token_file=- "
                            "--exit_on_stdin_eof --master_addr=",
                            p->node, l->nprocs, l->world, p->host->workers, l->o->master_port,
                            p->node == 0 ? "true" : "false");
    if (st == MSR_OK)
        st = append_quoted(b, msr_remote_host_addr(l, 0));
    if (st == MSR_OK)
        st = msr_buf_append(b, "--job_id=", 9);
    if (st == MSR_OK)
        st = append_quoted(b, l->job_id);
    if (st == MSR_OK)
        st = append_relays(l, i, b);
    for (int k = 0; st == MSR_OK && k < l->nfwd; k++)
        st = append_quoted(b, l->fwd[k]);
    return st;
}

/* ssh's argv for host i: --ssh's words, then -T -o BatchMode=yes HOST
 * COMMAND. *words_p and *cmd_p are the caller's to free. */
msr_status_t msr_remote_ssh_argv(const remote_launch_t *l, int i, char ***argv_p, char **words_p,
                                 msr_buf_t *cmd)
{
    const char *ssh = l->o->ssh ? l->o->ssh : "ssh";
    char *words = msr_strdup(ssh);
    size_t max = strlen(ssh) / 2 + 8;
    char **argv = msr_calloc(max, sizeof *argv);
    if (words == NULL || argv == NULL || remote_command(l, i, cmd) != MSR_OK) {
        msr_free(words);
        msr_free(argv);
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    }
    size_t n = 0;
    char *save = NULL;
    for (char *w = strtok_r(words, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
        argv[n++] = w;
    argv[n++] = "-T";
    argv[n++] = "-o";
    argv[n++] = "BatchMode=yes";
    argv[n++] = l->procs[i].host->name;
    argv[n++] = cmd->data;
    *argv_p = argv;
    *words_p = words;
    return MSR_OK;
}

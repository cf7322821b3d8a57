/* `msrun dashboard`: a new login URL for a running job's dashboard, asked
 * of its coordinator with the job token (POST /api/login) and told only to
 * a terminal or a 0600 file (docs/observe.md). */
#include "launcher/commands.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/optparse.h"
#include "base/status.h"
#include "base/util.h"
#include "cluster/http.h"
#include "launcher/dashboard_login.h"
#include "launcher/net.h"
#include "launcher/options.h"
#include "launcher/rundir.h"
#include "launcher/token.h"

/* How long the coordinator has to answer. */
#define DASHBOARD_ASK_S 10

typedef struct dashboard_args {
    char *addr;
    int port;
    char *token, *token_file, *job_id, *login_file;
    int prometheus;
} dashboard_args_t;

#define A(field) MSR_OPT_DEST(dashboard_args_t, field)

/* clang-format off */
static const msr_opt_t dashboard_opts[] = {
    {.name = "dashboard_port", .kind = MSR_OPT_PORT, .min = 1, .max = 65535,
     .env = "MSRUN_DASHBOARD_PORT", .dest = A(port), .metavar = "PORT",
     .help = "the port the job's dashboard listens on (msrun's --dashboard_port); without it, "
             "the port msrun of the job of this machine was given."},
    {.name = "dashboard_addr", .kind = MSR_OPT_STRING, .env = "MSRUN_DASHBOARD_ADDR",
     .dest = A(addr), .def = "127.0.0.1", .metavar = "ADDR",
     .help = "the address of the dashboard."},
    {.name = "token_file", .kind = MSR_OPT_STRING, .group = 1, .env = "MSRUN_TOKEN_FILE",
     .dest = A(token_file), .metavar = "PATH",
     .help = "read the job token from PATH, a file only you may read (mode 0600)."},
    {.name = "token", .aliases = {"job_token"}, .kind = MSR_OPT_SECRET, .group = 1,
     .env = "MSRUN_TOKEN", .dest = A(token), .metavar = "SECRET",
     .help = "the job token (prefer MSRUN_TOKEN or --token_file: others may see a command line)."},
    {.name = "job_id", .kind = MSR_OPT_STRING, .dest = A(job_id), .metavar = "ID",
     .help = "without a token or a port: take them from this job of the ones running on this "
             "machine (needed when there are several)."},
    {.name = "dashboard_login_file", .kind = MSR_OPT_STRING, .env = "MSRUN_DASHBOARD_LOGIN_FILE",
     .dest = A(login_file), .def = "stderr if a terminal, else the runtime directory",
     .metavar = "PATH",
     .help = "write the login URL to PATH, a new file of mode 0600 (an existing file or link is "
             "refused), and say only where it is."},
    {.name = "prometheus", .kind = MSR_OPT_BOOL, .flags = MSR_OPT_NO_VALUE, .dest = A(prometheus),
     .help = "print a Prometheus scrape config for the job's /metrics instead (its token read "
             "from a file: --token_file, else a new 0600 file in the runtime directory)."},
};
/* clang-format on */

static const msr_optset_t dashboard_set = {"msrun dashboard", dashboard_opts,
                                           MSR_ARRAY_SIZE(dashboard_opts), 0};

static void dashboard_usage(FILE *out)
{
    fprintf(out, "usage: msrun dashboard [--dashboard_port PORT] [--dashboard_addr ADDR]\n"
                 "                       [--token_file F] [--dashboard_login_file PATH]\n"
                 "                       [--prometheus]\n"
                 "\n"
                 "Asks a running job's coordinator for a new login URL of its dashboard (one\n"
                 "use, within the job's --dashboard_login_ttl). The job token comes from\n"
                 "--token_file, --token, MSRUN_TOKEN_FILE, MSRUN_TOKEN or the job of this\n"
                 "machine (--job_id when there are several). The URL goes to stderr when it is\n"
                 "a terminal, else to a new file of mode 0600, whose path stderr gives.\n"
                 "With --prometheus it prints a scrape config for the job's /metrics instead.\n"
                 "\n"
                 "Exit status: 0 when told, 1 when the coordinator refused or was not reached,\n"
                 "2 for bad input.\n"
                 "\n"
                 "options:\n");
    msr_opts_usage(&dashboard_set, out);
}

/* What a does not say of the job of this machine (the only one, or a's
 * --job_id; when no port was given, of those whose msrun serves a
 * dashboard): its token (want_token) and its dashboard's port. 0, or 2
 * after saying why. */
static int job_from_records(dashboard_args_t *a, int want_token)
{
    msr_run_entry_t *e = NULL;
    size_t n = 0, found = 0, at = 0;
    if (msr_run_records_list(&e, &n) == MSR_OK)
        for (size_t i = 0; i < n; i++)
            if ((a->job_id == NULL || strcmp(e[i].rec.job_id, a->job_id) == 0) &&
                (a->port > 0 || e[i].rec.dashboard_port > 0)) {
                found++;
                at = i;
            }
    int r = 2;
    if (found == 1 && (!want_token || (a->token = msr_strdup(e[at].rec.token)) != NULL)) {
        if (a->port <= 0)
            a->port = e[at].rec.dashboard_port;
        r = 0;
    } else if (a->port <= 0) {
        fprintf(stderr, "msrun dashboard: error: %s: give the job's --dashboard_port%s\n",
                found ? "several jobs with a dashboard run here"
                      : "no job with a dashboard runs here",
                found ? " or --job_id" : "");
    } else {
        fprintf(stderr,
                "msrun dashboard: error: no job token: give it with --token_file FILE (mode "
                "0600) or MSRUN_TOKEN%s\n",
                found > 1 ? " (or --job_id: several jobs run here)" : "");
    }
    msr_run_entries_free(e, n);
    return r;
}

/* Connects to addr:port with DASHBOARD_ASK_S on every wait: the socket, or
 * -1 (errno). */
static int connect_to(const char *addr, int port)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(addr, ps, &hints, &ai) != 0) {
        errno = EHOSTUNREACH;
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
        if (fd < 0)
            continue;
        struct timeval tv = {DASHBOARD_ASK_S, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
            int e = errno;
            close(fd);
            fd = -1;
            errno = e;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

/* POST /api/login: the answer's status and body (up to len - 1 bytes, with
 * a NUL), or -1 (errno). */
static int ask(const dashboard_args_t *a, char *body, size_t len)
{
    int fd = connect_to(a->addr, a->port);
    if (fd < 0)
        return -1;
    char req[MSR_TOKEN_MAX + 512];
    int n = snprintf(req, sizeof req,
                     "POST /api/login HTTP/1.0\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                     "Content-Length: 0\r\n\r\n",
                     a->addr, a->token);
    msr_status_t st = msr_write_all(fd, req, (size_t)n);
    memset(req, 0, sizeof req);
    char resp[4096];
    size_t got = 0;
    while (st == MSR_OK && got < sizeof resp - 1) {
        ssize_t r = read(fd, resp + got, sizeof resp - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    resp[got] = '\0';
    int code = 0;
    const char *sep = strstr(resp, "\r\n\r\n");
    if (st != MSR_OK || sscanf(resp, "HTTP/1.%*d %d", &code) != 1 || sep == NULL) {
        errno = got ? EPROTO : ETIMEDOUT;
        return -1;
    }
    snprintf(body, len, "%s", sep + 4);
    memset(resp, 0, sizeof resp);
    return code;
}

/* The file Prometheus reads the token from: --token_file, else a new
 * file of mode 0600 in the runtime directory (token-<port>, replaced). 0,
 * or 1 after saying why. */
static int prometheus_token_file(const dashboard_args_t *a, char *path, size_t len)
{
    if (a->token_file) {
        snprintf(path, len, "%s", a->token_file);
        return 0;
    }
    char dir[PATH_MAX];
    if (msr_run_dir_open(dir, sizeof dir) != MSR_OK ||
        (size_t)snprintf(path, len, "%s/token-%d", dir, a->port) >= len) {
        fprintf(stderr, "msrun dashboard: error: no file for the token: %s\n",
                msr_err_msg()[0] ? msr_err_msg() : "the runtime directory's path is too long");
        return 1;
    }
    unlink(path);
    if (msr_token_write_file(path, a->token) != MSR_OK) {
        fprintf(stderr, "msrun dashboard: error: %s\n", msr_err_msg());
        return 1;
    }
    return 0;
}

/* --prometheus: a scrape config on stdout that names the token's file,
 * never the token. */
static int prometheus_config(const dashboard_args_t *a, const char *hp)
{
    char file[PATH_MAX + 64];
    if (prometheus_token_file(a, file, sizeof file) != 0)
        return 1;
    printf("# Prometheus: the job's /metrics (a copy of the token file must be readable by\n"
           "# Prometheus' user; the file of a job without --token_file goes with the job)\n"
           "scrape_configs:\n"
           "  - job_name: msrun\n"
           "    metrics_path: /metrics\n"
           "    authorization:\n"
           "      type: Bearer\n"
           "      credentials_file: %s\n"
           "    static_configs:\n"
           "      - targets: ['%s']\n",
           file, hp);
    fprintf(stderr, "msrun dashboard: the scrape config reads the job token from %s (mode 0600)\n",
            file);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int dashboard_run(dashboard_args_t *a)
{
    int given = a->token || a->token_file;
    int r = given ? msr_options_need_token("msrun dashboard", &a->token, a->token_file) : 0;
    if (r == 0 && (!given || a->port <= 0))
        r = job_from_records(a, !given);
    if (r != 0)
        return r;
    const char *addr = a->addr ? a->addr : "127.0.0.1";
    a->addr = a->addr ? a->addr : msr_strdup(addr);
    char body[1024], code[MSR_HTTP_CODE_LEN], hp[300];
    long long ttl = 0;
    msr_net_join(addr, a->port, hp, sizeof hp);
    if (a->prometheus)
        return prometheus_config(a, hp);
    int status = a->addr ? ask(a, body, sizeof body) : -1;
    if (status < 0) {
        fprintf(stderr, "msrun dashboard: error: cannot ask the dashboard at %s: %s\n", hp,
                strerror(errno));
        return 1;
    }
    if (status != 200) {
        fprintf(stderr, "msrun dashboard: error: the dashboard at %s refused (HTTP %d)%s\n", hp,
                status, status == 401 ? ": not the job's token" : "");
        return 1;
    }
    const char *c = strstr(body, "\"code\":\"");
    const char *t = strstr(body, "\"ttl\":");
    if (c == NULL || t == NULL || sscanf(c + 8, "%32[0-9a-f]", code) != 1 ||
        strlen(code) != MSR_HTTP_CODE_LEN - 1 || sscanf(t + 6, "%lld", &ttl) != 1) {
        fprintf(stderr, "msrun dashboard: error: the dashboard at %s answered no login code\n", hp);
        return 1;
    }
    char file[MSR_DASHBOARD_LOGIN_PATH_LEN] = "";
    if (a->login_file == NULL && !isatty(STDERR_FILENO) &&
        msr_dashboard_login_default(a->port, file, sizeof file) != MSR_OK) {
        fprintf(stderr, "msrun dashboard: error: no file for the login URL: %s\n", msr_err_msg());
        return 2;
    }
    r = msr_dashboard_login_tell("msrun dashboard", hp, code, ttl, a->login_file, file) == MSR_OK
            ? 0
            : 1;
    memset(code, 0, sizeof code);
    memset(body, 0, sizeof body);
    return r;
}

int msr_dashboard_main(int argc, char **argv)
{
    dashboard_args_t a = {0};
    unsigned char seen[MSR_ARRAY_SIZE(dashboard_opts)];
    int next, r = 2;
    switch (msr_opts_parse(&dashboard_set, argc, argv, &a, seen, &next)) {
    case MSR_OPTS_HELP:
        dashboard_usage(stdout);
        r = 0;
        break;
    case MSR_OPTS_OK:
        if (next < argc) {
            fprintf(stderr, "msrun dashboard: error: unexpected argument '%s'\n", argv[next]);
            break;
        }
        r = dashboard_run(&a);
        break;
    default:
        msr_opts_print_error(&dashboard_set);
        break;
    }
    if (a.token)
        memset(a.token, 0, strlen(a.token));
    msr_opts_free(&dashboard_set, &a);
    return r;
}

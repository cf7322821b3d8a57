/* What torchrun and mpirun users type, mapped to msrun's options (issue
 * 39, docs/usage.md): --rdzv_conf's keys, --nproc_per_node's words and the
 * default worker count, the torch port, -x's variables, and the options
 * accepted without effect. */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/status.h"
#include "base/util.h"
#include "launcher/job.h"
#include "launcher/options.h"
#include "launcher/options_impl.h"

static int given(const unsigned char *seen, const char *name)
{
    return seen[msr_opts_find(&msr_options_set, name)] != 0;
}

/* A --rdzv_conf value in seconds into *ms_p, at least min_ms. */
static int conf_seconds(const char *key, const char *v, int64_t min_ms, int64_t *ms_p)
{
    char *end = NULL;
    errno = 0;
    double s = strtod(v, &end);
    if (end == v || *end != '\0' || errno || !(s >= 0 && s <= 1e9) ||
        (int64_t)(s * 1000.0 + 0.5) < min_ms) {
        msr_options_error("--rdzv_conf %s=%s is not a number of seconds of at least %g", key, v,
                          (double)min_ms / 1000.0);
        return -1;
    }
    *ms_p = (int64_t)(s * 1000.0 + 0.5);
    return 0;
}

/* One KEY=VALUE of --rdzv_conf; an option given by name wins over it. */
static int conf_apply(msr_options_t *o, const unsigned char *seen, const char *key, const char *v)
{
    int64_t ms;
    if (strcmp(key, "join_timeout") == 0 || strcmp(key, "timeout") == 0) {
        if (conf_seconds(key, v, 1, &ms) != 0)
            return -1;
        if (!given(seen, "cluster_time_out"))
            o->cluster_time_out_ms = ms;
    } else if (strcmp(key, "last_call_timeout") == 0) {
        if (conf_seconds(key, v, 1, &ms) != 0)
            return -1;
        if (!given(seen, "last_call"))
            o->last_call_ms = ms;
    } else if (strcmp(key, "heartbeat") == 0) {
        if (conf_seconds(key, v, 10, &ms) != 0)
            return -1;
        if (!given(seen, "heartbeat_interval"))
            o->heartbeat_ms = ms;
    } else if (strcmp(key, "is_host") == 0) {
        int b;
        if (msr_parse_bool(v, &b) != MSR_OK) {
            msr_options_error("--rdzv_conf is_host=%s is not a boolean (true/false)", v);
            return -1;
        }
        if (!given(seen, "coordinator_here"))
            o->coordinator_here = b;
    } else if (strcmp(key, "read_timeout") != 0 && strcmp(key, "close_timeout") != 0) {
        msr_options_error("--rdzv_conf: unknown key '%s' (known: join_timeout, timeout, "
                          "last_call_timeout, heartbeat, is_host, read_timeout, close_timeout)",
                          key);
        return -1;
    }
    return 0;
}

int msr_options_apply_habits(msr_options_t *o, const unsigned char *seen)
{
    if (o->rdzv_backend == MSR_RDZV_C10D)
        o->rdzv_backend = MSR_RDZV_STATIC;
    if (o->rdzv_conf == NULL)
        return 0;
    char buf[1024];
    if (strlen(o->rdzv_conf) >= sizeof buf) {
        msr_options_error("--rdzv_conf is longer than %zu characters", sizeof buf - 1);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", o->rdzv_conf);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (eq == NULL || eq == kv || eq[1] == '\0') {
            msr_options_error("--rdzv_conf: '%s' is not KEY=VALUE", kv);
            return -1;
        }
        *eq = '\0';
        if (conf_apply(o, seen, kv, eq + 1) != 0)
            return -1;
    }
    return 0;
}

/* Entries of dir whose names start with prefix followed by a digit ("" and
 * any name but . and ..: every entry). */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    int n = 0;
    size_t plen = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (plen && (strncmp(e->d_name, prefix, plen) != 0 || e->d_name[plen] < '0' ||
                     e->d_name[plen] > '9'))
            continue;
        n++;
    }
    closedir(d);
    return n;
}

int msr_options_visible_gpus(void)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd) {
        /* CUDA reads entries up to the first that names no device: "-1",
         * an empty one */
        int n = 0;
        const char *p = cvd;
        while (*p && *p != '-' && *p != ',') {
            n++;
            p = strchr(p, ',');
            if (p == NULL)
                break;
            p++;
        }
        return n;
    }
    int n = count_entries("/proc/driver/nvidia/gpus", "");
    return n > 0 ? n : count_entries("/dev", "nvidia");
}

int msr_options_resolve_nproc(msr_options_t *o)
{
    int word = o->local_worker_num;
    if (!o->given_local_worker_num && !o->given_worker_num)
        word = MSR_NPROC_AUTO; /* torchrun's default */
    if (word > 0)
        return 0;
    msr_origin_t *org = &o->origins.local_worker_num;
    int gpus = msr_options_visible_gpus();
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (word == MSR_NPROC_CPU) {
        cpu_set_t set;
        int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
        o->local_worker_num = cpus > 0 ? cpus : 1;
        if (org->src != MSR_SRC_OPTION && org->src != MSR_SRC_ENV)
            msr_origin_set(org, MSR_SRC_DERIVED, "cpu: the CPUs msrun may use");
        return 0;
    }
    if (word == MSR_NPROC_GPU && gpus == 0) {
        msr_options_error(
            "local_worker_num (nproc_per_node) is gpu, but no GPU is visible (%s%s%s)",
            cvd ? "CUDA_VISIBLE_DEVICES='" : "no NVIDIA GPU found", cvd ? cvd : "", cvd ? "'" : "");
        return -1;
    }
    o->local_worker_num = gpus > 0 ? gpus : 1;
    if (org->src == MSR_SRC_DEFAULT)
        msr_origin_set(org, MSR_SRC_DERIVED, "%s",
                       gpus > 0 ? "one per visible GPU" : "no GPU visible: 1");
    return 0;
}

/* Whether port is free for torch's store on this host (it listens on
 * every interface, with SO_REUSEADDR); prints why not. */
static int torch_port_free(int port, const char *what)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0; /* no check possible: torch will say */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    int err = errno;
    close(fd);
    if (rc == 0)
        return 0;
    msr_options_error("torch's port %d (the workers' MASTER_PORT, %s) cannot be used on this "
                      "host: %s; free it or choose another with --torch_port PORT",
                      port, what, err == EADDRINUSE ? "it is in use" : strerror(err));
    return -1;
}

/* The workers' MASTER_PORT: --torch_port, else master_port + 1 when the
 * user or a scheduler chose master_port (a standalone job without one and
 * etcd's elected coordinator keep a free port). */
static int resolve_torch_port(msr_options_t *o, const unsigned char *seen)
{
    int chosen = o->etcd_endpoints == NULL && o->master_port > 0 &&
                 (o->master_addr != NULL || o->given_master_port);
    const char *what = "--torch_port";
    if (given(seen, "torch_port")) {
        if (chosen && o->torch_port == o->master_port) {
            msr_options_error("--torch_port %d is master_port, where the coordinator listens: "
                              "give another",
                              o->torch_port);
            return -1;
        }
    } else if (chosen) {
        if (o->master_port >= 65535) {
            msr_options_error("master_port %d leaves no port above it for torch's store (the "
                              "workers' MASTER_PORT is master_port + 1): give --torch_port PORT",
                              o->master_port);
            return -1;
        }
        o->torch_port = o->master_port + 1;
        what = "master_port + 1";
    } else {
        return 0;
    }
    /* node 0 hosts torch's store: a standalone job, or node rank 0 */
    if (!o->dry_run && (o->master_addr == NULL || o->node_rank == 0))
        return torch_port_free(o->torch_port, what);
    return 0;
}

/* -x VAR=VALUE into msrun's environment (the workers inherit it); -x VAR
 * must be set. */
static int apply_exports(msr_options_t *o)
{
    for (size_t i = 0; o->exports && o->exports[i]; i++) {
        const char *x = o->exports[i];
        const char *eq = strchr(x, '=');
        size_t n = eq ? (size_t)(eq - x) : strlen(x);
        int ok = n > 0 && (x[0] < '0' || x[0] > '9');
        for (size_t k = 0; k < n && ok; k++)
            ok = x[k] == '_' || (x[k] >= 'A' && x[k] <= 'Z') || (x[k] >= 'a' && x[k] <= 'z') ||
                 (x[k] >= '0' && x[k] <= '9');
        if (!ok) {
            msr_options_error("-x %s: '%.*s' is not a variable name (letters, digits, '_')", x,
                              (int)n, x);
            return -1;
        }
        if (eq == NULL) {
            if (getenv(x) == NULL) {
                msr_options_error("-x %s: %s is not set here; give -x %s=VALUE", x, x, x);
                return -1;
            }
            continue;
        }
        char name[256];
        if (n >= sizeof name) {
            msr_options_error("-x: a variable name is at most %zu characters", sizeof name - 1);
            return -1;
        }
        memcpy(name, x, n);
        name[n] = '\0';
        if (setenv(name, eq + 1, 1) != 0) {
            msr_options_error("-x %s: %s", x, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int msr_options_finish_habits(msr_options_t *o, const unsigned char *seen)
{
    if (o->local_addr && strlen(o->local_addr) >= MSR_IP_LEN) {
        msr_options_error("--local_addr is longer than %d characters", MSR_IP_LEN - 1);
        return -1;
    }
    if (resolve_torch_port(o, seen) != 0 || apply_exports(o) != 0)
        return -1;
    if (given(seen, "monitor_interval"))
        fprintf(stderr, "msrun: warning: --monitor_interval is ignored: msrun learns of a "
                        "worker's exit at once, from the kernel\n");
    return 0;
}

/* The launcher's host list: Open MPI's hostfile and -H formats, and the
 * workers each host gets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/util.h"
#include "launcher/remote.h"

/* The hosts being parsed, with an index of their names (open addressing,
 * FNV-1a) so that a name given again is found at once. */
typedef struct hosts_builder {
    msr_remote_hosts_t h;
    int *slot; /* [cap]: index in h.v + 1; 0: empty */
    size_t cap;
} hosts_builder_t;

static uint64_t name_hash(const char *s, size_t n)
{
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        x = (x ^ (unsigned char)s[i]) * 1099511628211ull;
    return x;
}

/* Where name is in the index, or the empty slot it would take. */
static size_t find_slot(const hosts_builder_t *b, const char *name, size_t n)
{
    size_t i = (size_t)name_hash(name, n) & (b->cap - 1);
    for (; b->slot[i]; i = (i + 1) & (b->cap - 1)) {
        const char *e = b->h.v[b->slot[i] - 1].name;
        if (strlen(e) == n && memcmp(e, name, n) == 0)
            break;
    }
    return i;
}

/* Doubles the index when it is half full. */
static msr_status_t grow_index(hosts_builder_t *b)
{
    if ((size_t)b->h.count * 2 < b->cap)
        return MSR_OK;
    size_t cap = b->cap ? b->cap * 2 : 64;
    int *old = b->slot;
    size_t old_cap = b->cap;
    b->slot = msr_calloc(cap, sizeof *b->slot);
    if (b->slot == NULL) {
        b->slot = old;
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    }
    b->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i]) {
            const char *e = b->h.v[old[i] - 1].name;
            b->slot[find_slot(b, e, strlen(e))] = old[i];
        }
    msr_free(old);
    return MSR_OK;
}

/* Ends the build: *h gets the hosts on success, else they are freed. */
static msr_status_t builder_end(hosts_builder_t *b, msr_status_t st, msr_remote_hosts_t *h)
{
    msr_free(b->slot);
    if (st != MSR_OK) {
        msr_remote_hosts_free(&b->h);
        return st;
    }
    *h = b->h;
    return MSR_OK;
}

/* Adds slots to host name (n bytes), merged with an earlier entry of the
 * same name as Open MPI does. where names the source for errors. */
static msr_status_t add_host(hosts_builder_t *b, const char *name, size_t n, int64_t slots,
                             const char *where)
{
    msr_remote_hosts_t *h = &b->h;
    if (n == 0)
        return msr_err(MSR_ERR_INVALID_ARG, "%s: a host name is missing", where);
    if (n > MSR_REMOTE_NAME_MAX)
        return msr_err(MSR_ERR_INVALID_ARG, "%s: the host name is longer than %d characters", where,
                       MSR_REMOTE_NAME_MAX);
    for (size_t i = 0; i < n; i++)
        if (name[i] <= ' ' || name[i] > '~' || name[i] == '\'' || name[i] == '"' ||
            name[i] == '\\' || (i == 0 && name[i] == '-'))
            return msr_err(MSR_ERR_INVALID_ARG, "%s: '%.*s' is not a host name", where, (int)n,
                           name);
    if (grow_index(b) != MSR_OK)
        return MSR_ERR_NO_MEMORY;
    size_t at = find_slot(b, name, n);
    if (b->slot[at]) {
        msr_remote_host_t *e = &h->v[b->slot[at] - 1];
        if ((int64_t)e->slots + slots > MSR_REMOTE_SLOTS_MAX)
            return msr_err(MSR_ERR_INVALID_ARG, "%s: host %s has more than %d slots in all", where,
                           e->name, MSR_REMOTE_SLOTS_MAX);
        e->slots += (int)slots;
        return MSR_OK;
    }
    if (h->count >= MSR_REMOTE_HOSTS_MAX)
        return msr_err(MSR_ERR_INVALID_ARG, "%s: more than %d hosts", where, MSR_REMOTE_HOSTS_MAX);
    if ((h->count & (h->count - 1)) == 0) { /* 0, 1, 2, 4...: grow by doubling */
        size_t cap = h->count ? (size_t)h->count * 2 : 1;
        msr_remote_host_t *v = msr_realloc(h->v, cap * sizeof *v);
        if (v == NULL)
            return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
        h->v = v;
    }
    char *copy = msr_malloc(n + 1);
    if (copy == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    memcpy(copy, name, n);
    copy[n] = '\0';
    h->v[h->count++] = (msr_remote_host_t){copy, (int)slots, 0};
    b->slot[at] = h->count;
    return MSR_OK;
}

/* A slot count, 1 to MSR_REMOTE_SLOTS_MAX. */
static msr_status_t parse_slots(const char *text, const char *what, const char *where,
                                int64_t *slots_p)
{
    if (msr_parse_i64(text, 1, MSR_REMOTE_SLOTS_MAX, slots_p) != MSR_OK)
        return msr_err(MSR_ERR_INVALID_ARG, "%s: %s '%s' is not a number from 1 to %d", where, what,
                       text, MSR_REMOTE_SLOTS_MAX);
    return MSR_OK;
}

/* One line of a hostfile, its comment cut off. */
static msr_status_t parse_line(hosts_builder_t *h, char *line, const char *where)
{
    char *save = NULL;
    char *name = strtok_r(line, " \t\r\n", &save);
    if (name == NULL)
        return MSR_OK; /* blank */
    int64_t slots = 1, ignored;
    int have_slots = 0;
    for (char *w; (w = strtok_r(NULL, " \t\r\n", &save)) != NULL;) {
        char *eq = strchr(w, '=');
        if (eq && (size_t)(eq - w) == 5 && strncmp(w, "slots", 5) == 0 && !have_slots) {
            if (parse_slots(eq + 1, "slots", where, &slots) != MSR_OK)
                return MSR_ERR_INVALID_ARG;
            have_slots = 1;
        } else if (eq && (size_t)(eq - w) == 9 && strncmp(w, "max_slots", 9) == 0) {
            if (parse_slots(eq + 1, "max_slots", where, &ignored) != MSR_OK)
                return MSR_ERR_INVALID_ARG;
        } else {
            return msr_err(MSR_ERR_INVALID_ARG,
                           "%s: '%s' is not understood: a line is 'HOST [slots=K]'", where, w);
        }
    }
    return add_host(h, name, strlen(name), slots, where);
}

msr_status_t msr_remote_hosts_parse_file(const char *path, msr_remote_hosts_t *h)
{
    int fd;
    if (msr_open_input(path, 0, &fd) != MSR_OK)
        return msr_err_prefix(MSR_ERR_IO, "the hostfile");
    FILE *f = fdopen(fd, "r");
    if (f == NULL) {
        close(fd);
        return msr_err(MSR_ERR_IO, "cannot read the hostfile %s: %s", path, strerror(errno));
    }
    hosts_builder_t got = {0};
    msr_status_t st = MSR_OK;
    char *line = NULL;
    size_t cap = 0;
    char where[300];
    ssize_t len;
    for (long no = 1; st == MSR_OK && (len = getline(&line, &cap, f)) >= 0; no++) {
        snprintf(where, sizeof where, "hostfile %.200s, line %ld", path, no);
        if (strlen(line) != (size_t)len) {
            st = msr_err(MSR_ERR_INVALID_ARG, "%s: a NUL byte in the line", where);
            break;
        }
        line[strcspn(line, "#")] = '\0';
        st = parse_line(&got, line, where);
    }
    if (st == MSR_OK && ferror(f))
        st = msr_err(MSR_ERR_IO, "cannot read the hostfile %s: %s", path, strerror(errno));
    if (st == MSR_OK && got.h.count == 0)
        st = msr_err(MSR_ERR_INVALID_ARG, "the hostfile %s names no host", path);
    free(line);
    fclose(f);
    return builder_end(&got, st, h);
}

msr_status_t msr_remote_hosts_parse_list(const char *list, msr_remote_hosts_t *h)
{
    hosts_builder_t got = {0};
    msr_status_t st = MSR_OK;
    const char *p = list;
    for (int item = 1; st == MSR_OK; item++) {
        size_t n = strcspn(p, ",");
        char where[64], num[32];
        snprintf(where, sizeof where, "--host, entry %d", item);
        const char *colon = memchr(p, ':', n);
        int64_t slots = 1;
        size_t name_n = colon ? (size_t)(colon - p) : n;
        if (colon) {
            size_t k = n - name_n - 1;
            snprintf(num, sizeof num, "%.*s", (int)(k < sizeof num ? k : sizeof num - 1),
                     colon + 1);
            if (k >= sizeof num || parse_slots(num, "the slot count", where, &slots) != MSR_OK)
                st = msr_err(MSR_ERR_INVALID_ARG,
                             "%s: '%.*s' is not HOST or HOST:K with K from 1 to %d", where,
                             (int)(n > 300 ? 300 : n), p, MSR_REMOTE_SLOTS_MAX);
        }
        if (st == MSR_OK)
            st = add_host(&got, p, name_n, slots, where);
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
    return builder_end(&got, st, h);
}

msr_status_t msr_remote_hosts_assign(msr_remote_hosts_t *h, int64_t n)
{
    int64_t sum = 0;
    for (int i = 0; i < h->count; i++)
        sum += h->v[i].slots;
    if (n > sum)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "%lld workers asked for, but the hosts have only %lld slots in all",
                       (long long)n, (long long)sum);
    if (n <= 0 && sum > INT32_MAX)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "the hosts have %lld slots in all, more than %d workers: give --worker_num",
                       (long long)sum, INT32_MAX);
    int64_t left = n > 0 ? n : sum;
    for (int i = 0; i < h->count; i++) {
        h->v[i].workers = (int)(left < h->v[i].slots ? left : h->v[i].slots);
        left -= h->v[i].workers;
    }
    return MSR_OK;
}

void msr_remote_hosts_free(msr_remote_hosts_t *h)
{
    if (h == NULL)
        return;
    for (int i = 0; i < h->count; i++)
        msr_free(h->v[i].name);
    msr_free(h->v);
    h->v = NULL;
    h->count = 0;
}

/* Slurm's compressed host lists, expanded (see hostlist.h for the grammar). */
#include "launcher/hostlist.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"

/* Bracket groups in one host ("a[1-2]-b[3-4]" has two); digits in a number. */
#define MAX_GROUPS 16
#define MAX_DIGITS 18

typedef struct range {
    uint64_t lo, hi;
    int width; /* the low bound's digits: zero padding */
} range_t;

/* One host's pattern: literal text between bracket groups. lit[i] comes
 * before group i; lit[ngroups] ends the host. */
typedef struct pattern {
    const char *lit[MAX_GROUPS + 1];
    size_t lit_len[MAX_GROUPS + 1];
    range_t *ranges;          /* every group's ranges, one after another */
    size_t first[MAX_GROUPS]; /* group g's ranges: ranges[first[g] .. first[g]+nr[g]-1] */
    size_t nr[MAX_GROUPS];
    uint64_t count[MAX_GROUPS]; /* numbers in group g */
    int ngroups;
} pattern_t;

static msr_status_t bad(const char *text, size_t at, const char *what)
{
    return msr_err(MSR_ERR_INVALID_ARG, "host list '%.200s': %s at character %zu", text, what,
                   at + 1);
}

static int digits_of(uint64_t v)
{
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* A number at s[*i]: digits only. */
static msr_status_t parse_number(const char *text, size_t *i, uint64_t *v_p, int *width_p)
{
    size_t start = *i;
    uint64_t v = 0;
    while (text[*i] >= '0' && text[*i] <= '9') {
        if (*i - start >= MAX_DIGITS)
            return bad(text, start, "a number of more than 18 digits");
        v = v * 10 + (uint64_t)(text[*i] - '0');
        (*i)++;
    }
    if (*i == start)
        return bad(text, start, "a number expected in brackets");
    *v_p = v;
    *width_p = (int)(*i - start);
    return MSR_OK;
}

/* The items of a bracket group, text[*i] just after '['; ends after ']'. */
static msr_status_t parse_group(const char *text, size_t *i, pattern_t *p, size_t *nranges,
                                uint64_t max_hosts)
{
    int g = p->ngroups;
    p->first[g] = *nranges;
    p->nr[g] = 0;
    p->count[g] = 0;
    for (;;) {
        range_t r;
        size_t at = *i;
        msr_status_t st = parse_number(text, i, &r.lo, &r.width);
        if (st != MSR_OK)
            return st;
        r.hi = r.lo;
        if (text[*i] == '-') {
            (*i)++;
            int w;
            if ((st = parse_number(text, i, &r.hi, &w)) != MSR_OK)
                return st;
            if (r.hi < r.lo)
                return bad(text, at, "a reversed range");
        }
        if (r.hi - r.lo >= max_hosts || p->count[g] + (r.hi - r.lo + 1) > max_hosts)
            return msr_err(MSR_ERR_OVERFLOW, "host list '%.200s': more than %llu hosts", text,
                           (unsigned long long)max_hosts);
        p->count[g] += r.hi - r.lo + 1;
        p->ranges[(*nranges)++] = r;
        p->nr[g]++;
        if (text[*i] == ',') {
            (*i)++;
            continue;
        }
        if (text[*i] == ']') {
            (*i)++;
            return MSR_OK;
        }
        if (text[*i] == '\0')
            return bad(text, *i, "'[' without ']'");
        return bad(text, *i, text[*i] == '[' ? "nested brackets" : "an unexpected character");
    }
}

/* One host's pattern, from text[*i] to the next top-level ',' or the end;
 * *i ends on that ',' or '\0'. *hosts_p: how many names it gives. */
static msr_status_t parse_host(const char *text, size_t *i, pattern_t *p, size_t *nranges,
                               uint64_t max_hosts, uint64_t *hosts_p)
{
    size_t start = *i;
    p->ngroups = 0;
    p->lit[0] = text + *i;
    p->lit_len[0] = 0;
    size_t name_len = 0;
    for (;;) {
        unsigned char c = (unsigned char)text[*i];
        if (c == '\0' || c == ',')
            break;
        if (c == '[') {
            if (p->ngroups == MAX_GROUPS)
                return bad(text, *i, "more than 16 bracket groups in one host");
            (*i)++;
            msr_status_t st = parse_group(text, i, p, nranges, max_hosts);
            if (st != MSR_OK)
                return st;
            /* the widest number of the group */
            int w = 0;
            for (size_t k = 0; k < p->nr[p->ngroups]; k++) {
                const range_t *r = &p->ranges[p->first[p->ngroups] + k];
                int d = digits_of(r->hi);
                if (r->width > w)
                    w = r->width;
                if (d > w)
                    w = d;
            }
            name_len += (size_t)w;
            p->ngroups++;
            p->lit[p->ngroups] = text + *i;
            p->lit_len[p->ngroups] = 0;
            continue;
        }
        if (c == ']')
            return bad(text, *i, "']' without '['");
        if (c <= ' ' || c == 0x7f)
            return bad(text, *i, "a space or control character");
        p->lit_len[p->ngroups]++;
        name_len++;
        (*i)++;
    }
    if (*i == start)
        return bad(text, *i, "an empty host name");
    if (name_len > MSR_HOSTLIST_NAME_MAX)
        return bad(text, start, "a host name longer than 255 characters");
    uint64_t n = 1;
    for (int g = 0; g < p->ngroups; g++) {
        if (p->count[g] > max_hosts / n)
            return msr_err(MSR_ERR_OVERFLOW, "host list '%.200s': more than %llu hosts", text,
                           (unsigned long long)max_hosts);
        n *= p->count[g];
    }
    *hosts_p = n;
    return MSR_OK;
}

/* Writes the pattern's names into hosts[*n ...]: an odometer over the
 * groups, the last one turning fastest. */
static msr_status_t expand_host(const pattern_t *p, char **hosts, size_t *n)
{
    size_t ri[MAX_GROUPS];  /* the range each group is in */
    uint64_t v[MAX_GROUPS]; /* its current number */
    for (int g = 0; g < p->ngroups; g++) {
        ri[g] = 0;
        v[g] = p->ranges[p->first[g]].lo;
    }
    for (;;) {
        char name[MSR_HOSTLIST_NAME_MAX + 1];
        size_t len = 0;
        for (int g = 0; g <= p->ngroups; g++) {
            memcpy(name + len, p->lit[g], p->lit_len[g]);
            len += p->lit_len[g];
            if (g == p->ngroups)
                break;
            const range_t *r = &p->ranges[p->first[g] + ri[g]];
            len += (size_t)snprintf(name + len, sizeof name - len, "%0*llu", r->width,
                                    (unsigned long long)v[g]);
        }
        name[len] = '\0';
        if ((hosts[*n] = msr_strdup(name)) == NULL)
            return msr_err(MSR_ERR_NO_MEMORY, "out of memory expanding a host list");
        (*n)++;
        int g = p->ngroups - 1;
        for (; g >= 0; g--) {
            const range_t *r = &p->ranges[p->first[g] + ri[g]];
            if (v[g] < r->hi) {
                v[g]++;
                break;
            }
            if (ri[g] + 1 < p->nr[g]) {
                ri[g]++;
                v[g] = p->ranges[p->first[g] + ri[g]].lo;
                break;
            }
            ri[g] = 0; /* wraps: the group before turns */
            v[g] = p->ranges[p->first[g]].lo;
        }
        if (g < 0)
            return MSR_OK;
    }
}

void msr_hostlist_free(msr_hostlist_t *hl)
{
    if (hl == NULL)
        return;
    for (size_t k = 0; hl->hosts && k < hl->count; k++)
        msr_free(hl->hosts[k]);
    msr_free(hl->hosts);
    hl->hosts = NULL;
    hl->count = 0;
}

msr_status_t msr_hostlist_expand(const char *text, size_t max_hosts, msr_hostlist_t *out_p)
{
    if (text == NULL)
        return msr_err(MSR_ERR_INVALID_ARG, "no host list");
    uint64_t cap = max_hosts ? max_hosts : MSR_HOSTLIST_MAX_HOSTS;
    size_t len = strlen(text);
    if (len == 0)
        return msr_err(MSR_ERR_INVALID_ARG, "the host list is empty");
    /* Pass 1: check everything and count, before any name is made. A range
     * takes at least one character, so len bounds the ranges of a host. */
    msr_hostlist_t hl = {NULL, 0};
    pattern_t p;
    p.ranges = msr_calloc(len, sizeof *p.ranges);
    if (p.ranges == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory parsing a host list");
    msr_status_t st = MSR_OK;
    uint64_t total = 0;
    size_t i = 0;
    for (;;) {
        size_t nranges = 0;
        uint64_t n;
        if ((st = parse_host(text, &i, &p, &nranges, cap, &n)) != MSR_OK)
            goto err_ranges;
        if (n > cap - total) {
            st = msr_err(MSR_ERR_OVERFLOW, "host list '%.200s': more than %llu hosts", text,
                         (unsigned long long)cap);
            goto err_ranges;
        }
        total += n;
        if (text[i] == '\0')
            break;
        i++; /* the ',' between hosts */
        if (text[i] == '\0') {
            st = bad(text, i, "an empty host name");
            goto err_ranges;
        }
    }
    /* Pass 2: the names. */
    hl.hosts = msr_calloc((size_t)total, sizeof(char *));
    if (hl.hosts == NULL) {
        st = msr_err(MSR_ERR_NO_MEMORY, "out of memory expanding a host list");
        goto err_ranges;
    }
    i = 0;
    for (;;) {
        size_t nranges = 0;
        uint64_t n;
        parse_host(text, &i, &p, &nranges, cap, &n); /* checked above */
        if ((st = expand_host(&p, hl.hosts, &hl.count)) != MSR_OK)
            goto err_hosts;
        if (text[i] == '\0')
            break;
        i++;
    }
    msr_free(p.ranges);
    *out_p = hl;
    return MSR_OK;

err_hosts:
    msr_hostlist_free(&hl);
err_ranges:
    msr_free(p.ranges);
    return st;
}

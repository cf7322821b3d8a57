/* The table-driven command-line parser (msrun and its subcommands use it). */
#include "base/optparse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"

/* Compares option names treating '-' and '_' alike. */
static int name_eq(const char *a, size_t alen, const char *b)
{
    size_t i = 0;
    for (; i < alen && b[i]; i++) {
        char x = a[i] == '-' ? '_' : a[i];
        char y = b[i] == '-' ? '_' : b[i];
        if (x != y)
            return 0;
    }
    return i == alen && b[i] == '\0';
}

/* The edit distance (Levenshtein) of a[0..alen) and b, '-' and '_' alike;
 * 3 for anything past 2 (all the caller asks) or names over 63 bytes. */
static int name_distance(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    if (alen > 63 || blen > 63)
        return 3;
    int row[64];
    for (size_t j = 0; j <= blen; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= alen; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= blen; j++) {
            char x = a[i - 1] == '-' ? '_' : a[i - 1];
            char y = b[j - 1] == '-' ? '_' : b[j - 1];
            int best = diag + (x != y);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = row[j];
            row[j] = best;
        }
    }
    return row[blen] > 3 ? 3 : row[blen];
}

/* How close a typed name is to a known one: 0 to 2 (edit distance; a
 * typed start of the name of 3 characters or more counts 2), or 3 when too
 * far for a hint. Short names need to be closer: 1 for 3 or 4 characters,
 * exact for fewer. */
static int name_near(const char *typed, size_t len, const char *known)
{
    int d = name_distance(typed, len, known);
    if (len >= 3 && len < strlen(known)) {
        size_t i = 0;
        while (i < len && (typed[i] == known[i] || (typed[i] == '-' && known[i] == '_')))
            i++;
        if (i == len) /* the start of the name */
            return d < 2 ? d : 2;
    }
    int most = len < 3 ? 0 : len < 5 ? 1 : 2;
    return d <= most ? d : 3;
}

/* The known name nearest to typed (name_near), or NULL. */
static const char *nearest_name(const msr_optset_t *set, const char *typed, size_t len)
{
    const char *best = NULL;
    int best_d = 3;
    for (size_t i = 0; i < set->count; i++) {
        const msr_opt_t *d = &set->opts[i];
        for (int k = -1; k < 3; k++) {
            const char *n = k < 0 ? d->name : d->aliases[k];
            if (n == NULL)
                break;
            int dist = name_near(typed, len, n);
            if (dist < best_d) {
                best_d = dist;
                best = n;
            }
        }
    }
    return best;
}

/* "unknown option '-x'", with " (did you mean --name?)" when one is near;
 * the hint's name takes the typed name's separator ('-' or '_'). */
static msr_status_t unknown_option(const msr_optset_t *set, const char *arg, const char *name,
                                   size_t nlen)
{
    const char *near = nearest_name(set, name, nlen);
    if (near == NULL)
        return msr_err(MSR_ERR_INVALID_ARG, "unknown option '%.*s'",
                       (int)(nlen + (size_t)(name - arg)), arg);
    char hint[80];
    int dash = memchr(name, '-', nlen) != NULL && memchr(name, '_', nlen) == NULL;
    snprintf(hint, sizeof hint, "%s", near);
    for (char *p = hint; dash && *p; p++)
        if (*p == '_')
            *p = '-';
    return msr_err(MSR_ERR_INVALID_ARG, "unknown option '%.*s' (did you mean --%s?)",
                   (int)(nlen + (size_t)(name - arg)), arg, hint);
}

static int find_opt(const msr_optset_t *set, const char *name, size_t len)
{
    for (size_t i = 0; i < set->count; i++) {
        const msr_opt_t *d = &set->opts[i];
        if (name_eq(name, len, d->name))
            return (int)i;
        for (int k = 0; k < 3 && d->aliases[k]; k++)
            if (name_eq(name, len, d->aliases[k]))
                return (int)i;
    }
    return -1;
}

int msr_opts_find(const msr_optset_t *set, const char *name)
{
    return find_opt(set, name, strlen(name));
}

const char *msr_opts_where(const msr_optset_t *set, const unsigned char *seen, const char *name,
                           char *buf, size_t len)
{
    int i = msr_opts_find(set, name);
    if (i >= 0 && seen[i] == 2 && set->opts[i].env)
        return set->opts[i].env;
    snprintf(buf, len, "--%s", name);
    return buf;
}

static void store_int(void *obj, size_t off, size_t size, int64_t v)
{
    char *p = (char *)obj + off;
    if (size == sizeof(int64_t)) {
        memcpy(p, &v, sizeof v);
    } else {
        int i = (int)v;
        memcpy(p, &i, sizeof i);
    }
}

static msr_status_t store_string(void *obj, size_t off, const char *v, size_t n)
{
    char *d = msr_malloc(n + 1);
    if (d == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    memcpy(d, v, n);
    d[n] = '\0';
    char **slot = (char **)(void *)((char *)obj + off);
    msr_free(*slot);
    *slot = d;
    return MSR_OK;
}

/* Appends a copy of v to the NULL-terminated array at obj + off. */
static msr_status_t list_append(void *obj, size_t off, const char *v)
{
    char ***slot = (char ***)(void *)((char *)obj + off);
    size_t n = 0;
    while (*slot && (*slot)[n])
        n++;
    char *copy = msr_strdup(v);
    char **grown = copy ? msr_realloc(*slot, (n + 2) * sizeof *grown) : NULL;
    if (grown == NULL) {
        msr_free(copy);
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    }
    grown[n] = copy;
    grown[n + 1] = NULL;
    *slot = grown;
    return MSR_OK;
}

/* The parser's own limit of a number of seconds, whatever an option's. */
#define SECONDS_MAX 1e9

/* seconds as a decimal number, to milliseconds: 0, or -1 when v is no
 * number of seconds, or -2 when it is a number below 0 or above
 * SECONDS_MAX (*ms_p not written then). */
static int parse_seconds(const char *v, int64_t *ms_p)
{
    char *end = NULL;
    errno = 0;
    double s = strtod(v, &end);
    if (end == v || *end != '\0' || s != s || (errno && (errno != ERANGE || fabs(s) < 1)))
        return -1; /* an underflow too: no number of milliseconds */
    if (errno == ERANGE || s < 0 || s > SECONDS_MAX)
        return -2;
    *ms_p = (int64_t)(s * 1000.0 + 0.5);
    return 0;
}

/* Where a value came from, for messages: w is "--name" or the variable,
 * sep how the value followed it ('=', or ' ' for "--name VALUE"). */
typedef struct src {
    const char *w;
    char sep;
} src_t;

static msr_status_t bad(src_t s, const char *v, const char *what)
{
    return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s %s", s.w, s.sep, v, what);
}

/* The words an INT option takes besides numbers (its choices), as
 * "one of a, b" into list. */
static void words_list(const msr_opt_t *d, char *list, size_t len)
{
    list[0] = '\0';
    for (int k = 0; d->choices[k]; k++) {
        size_t n = strlen(list);
        snprintf(list + n, len - n, "%s%s", k ? ", " : "", d->choices[k]);
    }
}

static msr_status_t parse_int(const msr_opt_t *d, const char *v, src_t s, int64_t *x)
{
    if (msr_parse_i64(v, d->min, d->max, x) == MSR_OK)
        return MSR_OK;
    for (int k = 0; d->kind == MSR_OPT_INT && d->choices && d->choices[k]; k++) {
        if (strcmp(v, d->choices[k]) == 0) {
            *x = -(int64_t)k - 1; /* below min: the caller tells words from numbers */
            return MSR_OK;
        }
    }
    if (d->kind == MSR_OPT_INT && d->choices) {
        char list[200];
        words_list(d, list, sizeof list);
        if (d->min == 1 && d->max >= INT32_MAX)
            return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s is not a positive integer or one of %s",
                           s.w, s.sep, v, list);
        return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s is not an integer >= %lld or one of %s", s.w,
                       s.sep, v, (long long)d->min, list);
    }
    if (d->kind == MSR_OPT_PORT)
        return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s is not a port number (%lld..%lld)", s.w, s.sep,
                       v, (long long)d->min, (long long)d->max);
    if (d->min == 1 && d->max >= INT32_MAX)
        return bad(s, v, "is not a positive integer");
    if (d->max >= INT32_MAX)
        return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s is not an integer >= %lld", s.w, s.sep, v,
                       (long long)d->min);
    return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s is not an integer in [%lld, %lld]", s.w, s.sep, v,
                   (long long)d->min, (long long)d->max);
}

/* A decimal number (strtod's syntax) within the option's bounds. */
static msr_status_t parse_real(const msr_opt_t *d, const char *v, src_t s, double *x)
{
    char *end = NULL;
    errno = 0;
    double r = strtod(v, &end);
    int open = (d->flags & MSR_OPT_MIN_OPEN) != 0;
    /* NaN fails both comparisons */
    if (end != v && *end == '\0' && errno == 0 && (open ? r > d->real_min : r >= d->real_min) &&
        r <= d->real_max) {
        *x = r;
        return MSR_OK;
    }
    return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s is not a number in %c%g, %g]", s.w, s.sep, v,
                   open ? '(' : '[', d->real_min, d->real_max);
}

/* Seconds within the option's bounds and the parser's limit; a number out
 * of them is told the bound it passed. */
static msr_status_t parse_secs(const msr_opt_t *d, const char *v, src_t s, int64_t *x)
{
    double max_s = (double)d->max / 1000.0 < SECONDS_MAX ? (double)d->max / 1000.0 : SECONDS_MAX;
    int r = parse_seconds(v, x);
    if (r == -1)
        return bad(s, v, "is not a number of seconds");
    if (r == 0 && *x == 0 && (d->flags & MSR_OPT_ZERO_OFF))
        return MSR_OK;
    if (r == 0 && *x >= d->min && *x <= d->max)
        return MSR_OK;
    if (r == -2 ? v[0] != '-' : *x > d->min)
        return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s: must be at most %.15g s", s.w, s.sep, v,
                       max_s);
    return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s: must be %sat least %g s", s.w, s.sep, v,
                   (d->flags & MSR_OPT_ZERO_OFF) ? "0 (off) or " : "", (double)d->min / 1000.0);
}

/* "N" or "MIN:MAX" */
static msr_status_t parse_range(const msr_opt_t *d, const char *v, src_t s, void *obj)
{
    const char *colon = strchr(v, ':');
    int64_t lo, hi;
    if (colon) {
        char left[32];
        snprintf(left, sizeof left, "%.*s", (int)(colon - v), v);
        if (msr_parse_i64(left, d->min, d->max, &lo) != MSR_OK ||
            msr_parse_i64(colon + 1, d->min, d->max, &hi) != MSR_OK || lo > hi)
            return msr_err(MSR_ERR_INVALID_ARG,
                           "%s%c%s is not N or MIN:MAX with %lld <= MIN <= MAX", s.w, s.sep, v,
                           (long long)d->min);
    } else {
        if (msr_parse_i64(v, d->min, d->max, &lo) != MSR_OK)
            return bad(s, v, "is not a positive integer or MIN:MAX");
        hi = lo;
    }
    store_int(obj, d->dest, sizeof(int), lo);
    store_int(obj, d->dest2, sizeof(int), hi);
    return MSR_OK;
}

/* "HOST:PORT", split at the last colon; an IPv6 address in brackets
 * ("[::1]:80") is stored without them */
static msr_status_t hostport(const char *v, src_t s, int64_t min, int64_t max, char **host_p,
                             int *port_p)
{
    const char *colon = strrchr(v, ':');
    int64_t port;
    if (colon == NULL || colon == v || msr_parse_i64(colon + 1, min, max, &port) != MSR_OK)
        return bad(s, v, "is not HOST:PORT");
    const char *host = v;
    size_t hlen = (size_t)(colon - v);
    if (host[0] == '[' && hlen >= 2 && host[hlen - 1] == ']') {
        host++;
        hlen -= 2;
    } else if (memchr(host, ':', hlen) != NULL) {
        return bad(s, v, "is not HOST:PORT (an IPv6 address goes in brackets: [::1]:29500)");
    }
    if (hlen == 0)
        return bad(s, v, "is not HOST:PORT");
    char *h = msr_malloc(hlen + 1);
    if (h == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    memcpy(h, host, hlen);
    h[hlen] = '\0';
    msr_free(*host_p);
    *host_p = h;
    *port_p = (int)port;
    return MSR_OK;
}

msr_status_t msr_opts_hostport(const char *v, const char *w, int64_t min, int64_t max,
                               char **host_p, int *port_p)
{
    return hostport(v, (src_t){w, '='}, min, max, host_p, port_p);
}

static msr_status_t parse_hostport(const msr_opt_t *d, const char *v, src_t s, void *obj)
{
    char *host = NULL;
    int port = 0;
    msr_status_t st = hostport(v, s, d->min, d->max, &host, &port);
    if (st == MSR_OK)
        st = store_string(obj, d->dest, host, strlen(host));
    msr_free(host);
    if (st == MSR_OK)
        store_int(obj, d->dest2, sizeof(int), port);
    return st;
}

static msr_status_t parse_enum(const msr_opt_t *d, const char *v, src_t s, int64_t *x)
{
    char list[200] = "";
    for (int k = 0; d->choices[k]; k++) {
        if (strcmp(v, d->choices[k]) == 0) {
            *x = k;
            return MSR_OK;
        }
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s%s", k ? ", " : "", d->choices[k]);
    }
    return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s is not one of %s", s.w, s.sep, v, list);
}

/* Checks v and writes it to the option's destination in obj; s says where
 * v came from for messages. */
static msr_status_t apply(const msr_opt_t *d, const char *v, src_t s, void *obj)
{
    int64_t x = 0;
    int b;
    msr_status_t st = MSR_OK;
    switch (d->kind) {
    case MSR_OPT_INT:
    case MSR_OPT_PORT:
        st = parse_int(d, v, s, &x);
        break;
    case MSR_OPT_REAL: {
        double r = 0;
        if ((st = parse_real(d, v, s, &r)) == MSR_OK)
            memcpy((char *)obj + d->dest, &r, sizeof r);
        return st;
    }
    case MSR_OPT_SECONDS:
        st = parse_secs(d, v, s, &x);
        break;
    case MSR_OPT_SIZE:
        if (msr_parse_size(v, d->min, d->max, &x) != MSR_OK)
            st = bad(s, v, "is not a positive size in bytes (e.g. 65536, 64K, 16M, 1G)");
        break;
    case MSR_OPT_BOOL:
        if (msr_parse_bool(v, &b) != MSR_OK)
            st = bad(s, v, "is not a boolean (true/false)");
        x = b;
        break;
    case MSR_OPT_LEVEL:
        x = msr_log_level_parse(v);
        if (x < 0)
            st = bad(s, v, "is not a log level (error, warn, info, debug)");
        break;
    case MSR_OPT_ENUM:
        st = parse_enum(d, v, s, &x);
        break;
    case MSR_OPT_PATH:
        if (*v != '\0' && access(v, R_OK) != 0)
            return msr_err(MSR_ERR_INVALID_ARG, "%s%c%s: cannot read it: %s", s.w, s.sep, v,
                           strerror(errno));
        /* fall through */
    case MSR_OPT_STRING:
    case MSR_OPT_SECRET:
    case MSR_OPT_TEXT:
        if (*v == '\0')
            return msr_err(MSR_ERR_INVALID_ARG, "%s needs a non-empty value", s.w);
        if (d->kind != MSR_OPT_TEXT)
            return store_string(obj, d->dest, v, strlen(v));
        memcpy((char *)obj + d->dest, &v, sizeof v);
        return MSR_OK;
    case MSR_OPT_RANGE:
        return parse_range(d, v, s, obj);
    case MSR_OPT_HOSTPORT:
        return parse_hostport(d, v, s, obj);
    case MSR_OPT_HELP:
        return MSR_OK; /* msr_opts_parse asks for the help before applying */
    case MSR_OPT_LIST:
        if (*v == '\0')
            return msr_err(MSR_ERR_INVALID_ARG, "%s needs a non-empty value", s.w);
        return list_append(obj, d->dest, v);
    }
    if (st == MSR_OK)
        store_int(obj, d->dest, d->size, x);
    return st;
}

void msr_opts_scrub_arg(char *arg, int after_eq)
{
    char *eq = after_eq ? strchr(arg, '=') : NULL;
    char *v = eq ? eq + 1 : arg;
    size_t n = strlen(v);
    size_t stars = n < 3 ? n : 3;
    memset(v, '*', stars);
    memset(v + stars, '\0', n - stars);
}

/* One option in argv[*i] (and its value, which may be argv[*i + 1]).
 * *help_p: it was the table's MSR_OPT_HELP row ("-help"). */
static msr_status_t parse_one(const msr_optset_t *set, int argc, char **argv, int *i, void *obj,
                              unsigned char *seen, int *help_p)
{
    const char *a = argv[*i];
    const char *name = a + (a[1] == '-' ? 2 : 1);
    const char *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    int k = find_opt(set, name, nlen);
    if (k < 0)
        return unknown_option(set, a, name, nlen);
    const msr_opt_t *d = &set->opts[k];
    char where[80];
    snprintf(where, sizeof where, "--%s", d->name);
    char *v_arg; /* the argv string that holds the value */
    const char *v;
    int flag = d->kind == MSR_OPT_BOOL || d->kind == MSR_OPT_HELP;
    if (eq && flag && (d->kind == MSR_OPT_HELP || (d->flags & MSR_OPT_NO_VALUE))) {
        return msr_err(MSR_ERR_INVALID_ARG, "%s takes no value", where);
    } else if (eq) {
        v = eq + 1;
        v_arg = argv[*i];
    } else if (flag) {
        /* --flag alone is true; a value only with '=' (--join=false), as
         * torchrun's flags: the next word is the program or an option */
        v_arg = NULL;
        v = "true";
    } else if (*i + 1 >= argc) {
        return msr_err(MSR_ERR_INVALID_ARG, "option %s needs a value%s%s%s", where,
                       d->metavar ? " (" : "", d->metavar ? d->metavar : "", d->metavar ? ")" : "");
    } else {
        v = v_arg = argv[++*i];
    }
    msr_status_t st = MSR_OK;
    for (size_t o = 0; d->group && o < set->count; o++)
        if (o != (size_t)k && set->opts[o].group == d->group && seen[o] == 1)
            st = msr_err(MSR_ERR_INVALID_ARG, "give --%s or --%s, not both", set->opts[o].name,
                         d->name);
    if (st == MSR_OK)
        st = apply(d, v, (src_t){where, eq ? '=' : ' '}, obj);
    /* a secret leaves the process list (/proc/PID/cmdline) at once: apply()
     * copied it */
    if (d->kind == MSR_OPT_SECRET)
        msr_opts_scrub_arg(v_arg, eq != NULL);
    if (st == MSR_OK)
        seen[k] = 1;
    *help_p = d->kind == MSR_OPT_HELP;
    return st;
}

/* The environment variables of the options not on the command line. One
 * of a group given on the command line wins over the group's variables. */
static msr_status_t parse_env(const msr_optset_t *set, void *obj, unsigned char *seen)
{
    for (size_t k = 0; k < set->count; k++) {
        const msr_opt_t *d = &set->opts[k];
        const char *v = d->env ? getenv(d->env) : NULL;
        if (seen[k] || v == NULL || *v == '\0')
            continue;
        int skip = 0;
        for (size_t o = 0; d->group && o < set->count; o++) {
            if (o == k || set->opts[o].group != d->group)
                continue;
            if (seen[o] == 1)
                skip = 1;
            else if (seen[o] == 2)
                return msr_err(MSR_ERR_INVALID_ARG, "%s and %s are both set: unset one",
                               set->opts[o].env, d->env);
        }
        if (skip)
            continue;
        msr_status_t st = apply(d, v, (src_t){d->env, '='}, obj);
        if (st != MSR_OK)
            return st;
        seen[k] = 2;
    }
    return MSR_OK;
}

msr_opts_result_t msr_opts_parse(const msr_optset_t *set, int argc, char **argv, void *obj,
                                 unsigned char *seen, int *next_p)
{
    memset(seen, 0, set->count);
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0 && set->positional) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            return MSR_OPTS_HELP;
        if (strcmp(a, "--version") == 0 && set->positional)
            return MSR_OPTS_VERSION;
        if (a[0] != '-' || a[1] == '\0') {
            if (set->positional)
                break;
            msr_err(MSR_ERR_INVALID_ARG, "unexpected argument '%s'", a);
            return MSR_OPTS_BAD;
        }
        int help = 0;
        if (parse_one(set, argc, argv, &i, obj, seen, &help) != MSR_OK)
            return MSR_OPTS_BAD;
        if (help)
            return MSR_OPTS_HELP;
    }
    if (parse_env(set, obj, seen) != MSR_OK)
        return MSR_OPTS_BAD;
    *next_p = i;
    return MSR_OPTS_OK;
}

void msr_opts_print_error(const msr_optset_t *set)
{
    fprintf(stderr, "%s: error: %s (see %s --help)\n", set->prog, msr_err_msg(), set->prog);
}

/* Writes text wrapped at 76 columns, indented by 6. */
static void print_wrapped(FILE *out, const char *h)
{
    while (*h) {
        size_t len = strlen(h);
        size_t cut = len;
        if (len > 70) {
            cut = 70;
            while (cut > 0 && h[cut] != ' ')
                cut--;
            if (cut == 0)
                cut = 70;
        }
        fprintf(out, "      %.*s\n", (int)cut, h);
        h += cut;
        while (*h == ' ')
            h++;
    }
}

/* MSR_OPTS_USAGE_LINE: "usage: PROG --a A [--b B --c C] [--d]" */
static void usage_line(const msr_optset_t *set, FILE *out)
{
    int open = 0; /* a '[' waits for its ']' */
    fprintf(out, "usage: %s", set->prog);
    for (size_t i = 0; i < set->count; i++) {
        const msr_opt_t *d = &set->opts[i];
        int join = open && (d->flags & MSR_OPT_USAGE_JOIN);
        if (open && !join) {
            fputc(']', out);
            open = 0;
        }
        if (!join && !(d->flags & MSR_OPT_USAGE_BARE)) {
            fputs(" [", out);
            open = 1;
        } else {
            fputc(' ', out);
        }
        fprintf(out, "--%s%s%s", d->name, d->metavar ? " " : "", d->metavar ? d->metavar : "");
    }
    fputs(open ? "]\n" : "\n", out);
}

void msr_opts_usage(const msr_optset_t *set, FILE *out)
{
    if (set->style == MSR_OPTS_USAGE_LINE) {
        usage_line(set, out);
        return;
    }
    for (size_t i = 0; i < set->count && set->style == MSR_OPTS_USAGE_COLUMNS; i++)
        fprintf(out, "  --%-14s %s\n", set->opts[i].name, set->opts[i].help);
    for (size_t i = 0; i < set->count && set->style == MSR_OPTS_USAGE_LIST; i++) {
        const msr_opt_t *d = &set->opts[i];
        char head[128];
        /* a flag's value goes after '=' only: --join[=BOOL] */
        int flag = d->kind == MSR_OPT_BOOL;
        int n = snprintf(head, sizeof head, "  --%s%s%s%s", d->name,
                         d->metavar ? (flag ? "[=" : " ") : "", d->metavar ? d->metavar : "",
                         d->metavar && flag ? "]" : "");
        /* mpirun's short habits as they are typed: -x, -H, -np */
        for (int k = 0; k < 3 && d->aliases[k]; k++)
            n += snprintf(head + n, sizeof head - (size_t)n, ", %s%s",
                          strlen(d->aliases[k]) <= 2 ? "-" : "--", d->aliases[k]);
        fprintf(out, "%s\n", head);
        print_wrapped(out, d->help);
        if (d->def && d->env)
            fprintf(out, "      [default: %s; env %s]\n", d->def, d->env);
        else if (d->def)
            fprintf(out, "      [default: %s]\n", d->def);
        else if (d->env)
            fprintf(out, "      [env %s]\n", d->env);
    }
}

void msr_opts_free(const msr_optset_t *set, void *obj)
{
    for (size_t i = 0; i < set->count; i++) {
        const msr_opt_t *d = &set->opts[i];
        if (d->kind == MSR_OPT_LIST) {
            char ***list = (char ***)(void *)((char *)obj + d->dest);
            for (size_t k = 0; *list && (*list)[k]; k++)
                msr_free((*list)[k]);
            msr_free(*list);
            *list = NULL;
            continue;
        }
        if (d->kind != MSR_OPT_STRING && d->kind != MSR_OPT_SECRET && d->kind != MSR_OPT_PATH &&
            d->kind != MSR_OPT_HOSTPORT)
            continue;
        char **slot = (char **)(void *)((char *)obj + d->dest);
        if (*slot && d->kind == MSR_OPT_SECRET)
            memset(*slot, 0, strlen(*slot));
        msr_free(*slot);
        *slot = NULL;
    }
}

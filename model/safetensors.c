/* The safetensors format (safetensors.h): a strict parser for the JSON
 * subset its header uses and the header's checks (the files:
 * safetensors_io.c). */
#include "model/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[MSR_ST_DTYPES] = {
    [MSR_ST_F32] = {"F32", 4},         [MSR_ST_BF16] = {"BF16", 2},
    [MSR_ST_F16] = {"F16", 2},         [MSR_ST_F64] = {"F64", 8},
    [MSR_ST_I64] = {"I64", 8},         [MSR_ST_I32] = {"I32", 4},
    [MSR_ST_I16] = {"I16", 2},         [MSR_ST_I8] = {"I8", 1},
    [MSR_ST_U64] = {"U64", 8},         [MSR_ST_U32] = {"U32", 4},
    [MSR_ST_U16] = {"U16", 2},         [MSR_ST_U8] = {"U8", 1},
    [MSR_ST_BOOL] = {"BOOL", 1},       [MSR_ST_F8_E4M3] = {"F8_E4M3", 1},
    [MSR_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *msr_st_dtype_name(msr_st_dtype_t d)
{
    return (unsigned)d < MSR_ST_DTYPES ? dtypes[d].name : "?";
}

size_t msr_st_dtype_size(msr_st_dtype_t d)
{
    return (unsigned)d < MSR_ST_DTYPES ? dtypes[d].size : 0;
}

uint64_t msr_st_tensor_elems(const msr_st_tensor_t *t)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* ---- the JSON subset ---- */

typedef struct parser {
    const char *s;
    size_t len, pos;
} parser_t;

static msr_status_t bad(const parser_t *p, const char *what)
{
    return msr_err(MSR_ERR_CORRUPT, "safetensors header: %s at byte %zu", what, p->pos);
}

static void skip_ws(parser_t *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

/* Consumes c (after whitespace) or fails. */
static msr_status_t expect(parser_t *p, char c)
{
    skip_ws(p);
    if (p->pos >= p->len || p->s[p->pos] != c) {
        char what[32];
        snprintf(what, sizeof what, "'%c' expected", c);
        return bad(p, what);
    }
    p->pos++;
    return MSR_OK;
}

/* Whether the next character (after whitespace) is c; consumes it if so. */
static int accept(parser_t *p, char c)
{
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == c) {
        p->pos++;
        return 1;
    }
    return 0;
}

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Appends the UTF-8 of code point cp to out (cap bytes). */
static int put_utf8(char *out, size_t cap, size_t *n, unsigned cp)
{
    unsigned char b[4];
    size_t k;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        k = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        k = 2;
    } else {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        k = 3;
    }
    if (*n + k > cap)
        return -1;
    memcpy(out + *n, b, k);
    *n += k;
    return 0;
}

/* A string into out (at most cap bytes, NUL-terminated: out holds cap + 1).
 * Escapes are decoded; \u escapes of the basic plane only (no surrogates). */
static msr_status_t parse_string(parser_t *p, char *out, size_t cap)
{
    msr_status_t st = expect(p, '"');
    if (st != MSR_OK)
        return st;
    size_t n = 0;
    for (;;) {
        if (p->pos >= p->len)
            return bad(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos++];
        if (c == '"')
            break;
        if (c < 0x20)
            return bad(p, "control character in a string");
        if (c != '\\') {
            if (n >= cap)
                return bad(p, "string too long");
            out[n++] = (char)c;
            continue;
        }
        if (p->pos >= p->len)
            return bad(p, "unterminated string");
        char e = p->s[p->pos++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *k = strchr(from, e);
        if (e != '\0' && k != NULL) {
            if (n >= cap)
                return bad(p, "string too long");
            out[n++] = to[k - from];
        } else if (e == 'u') {
            unsigned cp = 0;
            for (int i = 0; i < 4; i++) {
                int v = p->pos < p->len ? hex_val(p->s[p->pos]) : -1;
                if (v < 0)
                    return bad(p, "bad \\u escape");
                cp = cp * 16 + (unsigned)v;
                p->pos++;
            }
            if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF))
                return bad(p, "\\u escape of NUL or a surrogate");
            if (put_utf8(out, cap, &n, cp) != 0)
                return bad(p, "string too long");
        } else {
            return bad(p, "bad escape");
        }
    }
    out[n] = '\0';
    return MSR_OK;
}

/* A non-negative integer without sign, fraction or exponent. */
static msr_status_t parse_uint(parser_t *p, uint64_t *v)
{
    skip_ws(p);
    size_t start = p->pos;
    uint64_t x = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = (unsigned)(p->s[p->pos] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return bad(p, "integer overflows 64 bits");
        x = x * 10 + d;
        p->pos++;
    }
    if (p->pos == start)
        return bad(p, "non-negative integer expected");
    if (p->pos - start > 1 && p->s[start] == '0')
        return bad(p, "integer with a leading zero");
    if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
        return bad(p, "integer expected, not a fraction");
    *v = x;
    return MSR_OK;
}

/* [u, u, ...] into v (at most max entries), *n_p entries. */
static msr_status_t parse_uint_array(parser_t *p, uint64_t *v, int max, int *n_p)
{
    msr_status_t st = expect(p, '[');
    int n = 0;
    if (st != MSR_OK || accept(p, ']')) {
        *n_p = 0;
        return st;
    }
    do {
        if (n >= max)
            return bad(p, "array too long");
        if ((st = parse_uint(p, &v[n++])) != MSR_OK)
            return st;
    } while (accept(p, ','));
    *n_p = n;
    return expect(p, ']');
}

/* {"key": "string", ...}: __metadata__, checked and skipped. */
static msr_status_t parse_metadata(parser_t *p)
{
    char key[MSR_ST_NAME_MAX + 1], *val = msr_malloc(p->len + 1);
    if (val == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_status_t st = expect(p, '{');
    if (st == MSR_OK && !accept(p, '}')) {
        do {
            if ((st = parse_string(p, key, MSR_ST_NAME_MAX)) != MSR_OK ||
                (st = expect(p, ':')) != MSR_OK || (st = parse_string(p, val, p->len)) != MSR_OK)
                break;
        } while (accept(p, ','));
        if (st == MSR_OK)
            st = expect(p, '}');
    }
    msr_free(val);
    return st;
}

static msr_status_t tensor_bad(const char *name, const char *fmt, const char *what)
{
    return msr_err(MSR_ERR_CORRUPT, "safetensors header: tensor '%s': %s%s", name, fmt, what);
}

/* One tensor's object: exactly dtype, shape and data_offsets. */
static msr_status_t parse_tensor(parser_t *p, msr_st_tensor_t *t)
{
    char key[32], dt[16];
    unsigned seen = 0;
    msr_status_t st = expect(p, '{');
    if (st != MSR_OK)
        return st;
    if (!accept(p, '}')) {
        do {
            if ((st = parse_string(p, key, sizeof key - 1)) != MSR_OK ||
                (st = expect(p, ':')) != MSR_OK)
                return st;
            unsigned bit = strcmp(key, "dtype") == 0          ? 1u
                           : strcmp(key, "shape") == 0        ? 2u
                           : strcmp(key, "data_offsets") == 0 ? 4u
                                                              : 0u;
            if (bit == 0)
                return tensor_bad(t->name, "unknown key ", key);
            if (seen & bit)
                return tensor_bad(t->name, "duplicate key ", key);
            seen |= bit;
            if (bit == 1) {
                if ((st = parse_string(p, dt, sizeof dt - 1)) != MSR_OK)
                    return st;
                int d = 0;
                while (d < MSR_ST_DTYPES && strcmp(dtypes[d].name, dt) != 0)
                    d++;
                if (d == MSR_ST_DTYPES)
                    return tensor_bad(t->name, "unknown dtype ", dt);
                t->dtype = (msr_st_dtype_t)d;
            } else if (bit == 2) {
                if ((st = parse_uint_array(p, t->shape, MSR_ST_MAX_DIMS, &t->ndim)) != MSR_OK)
                    return msr_err_prefix(st, "tensor '%s': shape (at most %d dimensions)", t->name,
                                          MSR_ST_MAX_DIMS);
            } else {
                uint64_t off[2];
                int n;
                if ((st = parse_uint_array(p, off, 2, &n)) != MSR_OK)
                    return st;
                if (n != 2)
                    return tensor_bad(t->name, "data_offsets is not [begin, end]", "");
                t->begin = off[0];
                t->end = off[1];
            }
        } while (accept(p, ','));
        if ((st = expect(p, '}')) != MSR_OK)
            return st;
    }
    if (seen != 7u)
        return tensor_bad(t->name, "needs dtype, shape and data_offsets", "");
    return MSR_OK;
}

static int by_begin(const void *a, const void *b)
{
    const msr_st_tensor_t *x = *(const msr_st_tensor_t *const *)a;
    const msr_st_tensor_t *y = *(const msr_st_tensor_t *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const msr_st_tensor_t *const *)a)->name,
                  (*(const msr_st_tensor_t *const *)b)->name);
}

/* Sizes, uniqueness, and the offsets tiling [0, data_len). */
static msr_status_t check_tensors(msr_st_tensor_t *t, int n, uint64_t data_len)
{
    for (int i = 0; i < n; i++) {
        uint64_t bytes = msr_st_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) {
            if (t[i].shape[d] != 0 && bytes > UINT64_MAX / t[i].shape[d])
                return tensor_bad(t[i].name, "shape overflows 64 bits", "");
            bytes *= t[i].shape[d];
        }
        if (t[i].end < t[i].begin)
            return msr_err(MSR_ERR_CORRUPT,
                           "safetensors header: tensor '%s': data_offsets [%llu, %llu) end "
                           "before they begin",
                           t[i].name, (unsigned long long)t[i].begin, (unsigned long long)t[i].end);
        if (t[i].end - t[i].begin != bytes)
            return msr_err(MSR_ERR_CORRUPT,
                           "safetensors header: tensor '%s': data_offsets [%llu, %llu) hold %llu "
                           "bytes, but %s x its shape is %llu",
                           t[i].name, (unsigned long long)t[i].begin, (unsigned long long)t[i].end,
                           (unsigned long long)(t[i].end - t[i].begin),
                           msr_st_dtype_name(t[i].dtype), (unsigned long long)bytes);
    }
    const msr_st_tensor_t **o = msr_calloc((size_t)n + 1, sizeof *o);
    if (o == NULL)
        return MSR_ERR_NO_MEMORY;
    for (int i = 0; i < n; i++)
        o[i] = &t[i];
    msr_status_t st = MSR_OK;
    qsort(o, (size_t)n, sizeof *o, by_name);
    for (int i = 1; i < n && st == MSR_OK; i++)
        if (strcmp(o[i]->name, o[i - 1]->name) == 0)
            st = tensor_bad(o[i]->name, "named twice", "");
    qsort(o, (size_t)n, sizeof *o, by_begin);
    uint64_t at = 0;
    for (int i = 0; i < n && st == MSR_OK; i++) {
        if (o[i]->begin != at)
            st = msr_err(MSR_ERR_CORRUPT,
                         "safetensors header: tensor '%s' begins at %llu of the data, but the "
                         "tensor before it ends at %llu (%s)",
                         o[i]->name, (unsigned long long)o[i]->begin, (unsigned long long)at,
                         o[i]->begin > at ? "a gap" : "an overlap");
        at = o[i]->end;
    }
    if (st == MSR_OK && at != data_len)
        st = msr_err(MSR_ERR_CORRUPT,
                     "safetensors header: the tensors end at byte %llu of the data (the last is "
                     "'%s'), but the data section holds %llu bytes (%s)",
                     (unsigned long long)at, n > 0 ? o[n - 1]->name : "",
                     (unsigned long long)data_len,
                     at > data_len ? "past the end of the file" : "bytes left over");
    msr_free(o);
    return st;
}

/* The top-level object's members into *t_p (grown as needed). */
static msr_status_t parse_members(parser_t *p, msr_st_tensor_t **t_p, int *n_p)
{
    int n = 0, cap = 0, meta = 0;
    msr_st_tensor_t *t = NULL;
    char name[MSR_ST_NAME_MAX + 1];
    msr_status_t st = expect(p, '{');
    if (st == MSR_OK && !accept(p, '}')) {
        do {
            if ((st = parse_string(p, name, MSR_ST_NAME_MAX)) != MSR_OK ||
                (st = expect(p, ':')) != MSR_OK)
                break;
            if (strcmp(name, "__metadata__") == 0) {
                st = meta++ ? tensor_bad(name, "named twice", "") : parse_metadata(p);
                if (st != MSR_OK)
                    break;
                continue;
            }
            if (name[0] == '\0') {
                st = bad(p, "empty tensor name");
                break;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                msr_st_tensor_t *g = msr_realloc(t, (size_t)cap * sizeof *t);
                if (g == NULL) {
                    st = MSR_ERR_NO_MEMORY;
                    break;
                }
                t = g;
            }
            memset(&t[n], 0, sizeof t[n]);
            memcpy(t[n].name, name, sizeof name);
            if ((st = parse_tensor(p, &t[n++])) != MSR_OK)
                break;
        } while (accept(p, ','));
        if (st == MSR_OK)
            st = expect(p, '}');
    }
    if (st != MSR_OK) {
        msr_free(t);
        return st;
    }
    *t_p = t;
    *n_p = n;
    return MSR_OK;
}

msr_status_t msr_st_parse_header(const char *json, size_t len, uint64_t data_len,
                                 msr_st_tensor_t **tensors_p, int *n_p)
{
    parser_t p = {json, len, 0};
    msr_st_tensor_t *t = NULL;
    int n = 0;
    if (len == 0 || json[0] != '{')
        return bad(&p, "not a JSON object");
    msr_status_t st = parse_members(&p, &t, &n);
    if (st != MSR_OK)
        return st;
    while (st == MSR_OK && p.pos < len) /* the padding: spaces only */
        if (json[p.pos++] != ' ')
            st = bad(&p, "something after the header's object");
    if (st == MSR_OK)
        st = check_tensors(t, n, data_len);
    if (st != MSR_OK) {
        msr_free(t);
        return st;
    }
    if (t == NULL && (t = msr_calloc(1, sizeof *t)) == NULL)
        return MSR_ERR_NO_MEMORY;
    *tensors_p = t;
    *n_p = n;
    return MSR_OK;
}

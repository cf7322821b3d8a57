/* The safetensors reader and writer (model/safetensors.h): round trips,
 * the header's strict checks at each bound and one past, and files that
 * lie or shrink. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "model/safetensors.h"
#include "tests/runner.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/st_test.XXXXXX");
    MSR_CHECK(mkdtemp(dir) != NULL);
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    MSR_CHECK(system(cmd) == 0);
}

/* Writes u64 N, the header and data_len bytes of data (NULL: zeros). */
static void write_file(const char *path, const char *hdr, size_t hlen, uint64_t n, const void *data,
                       size_t data_len)
{
    FILE *f = fopen(path, "wb");
    MSR_CHECK(f != NULL);
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(n >> (8 * i));
    MSR_CHECK(fwrite(b, 1, 8, f) == 8);
    MSR_CHECK(fwrite(hdr, 1, hlen, f) == hlen);
    for (size_t i = 0; i < data_len; i++)
        MSR_CHECK(fputc(data != NULL ? ((const unsigned char *)data)[i] : 0, f) != EOF);
    MSR_CHECK(fclose(f) == 0);
}

static msr_status_t parse(const char *json, uint64_t data_len)
{
    msr_st_tensor_t *t = NULL;
    int n = -1;
    msr_err_clear();
    msr_status_t st = msr_st_parse_header(json, strlen(json), data_len, &t, &n);
    msr_free(t);
    return st;
}

static void test_roundtrip(void)
{
    make_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    msr_st_tensor_t spec[3] = {{.name = "wte", .ndim = 2, .shape = {5, 3}},
                               {.name = "h0.ln1w", .ndim = 1, .shape = {3}},
                               {.name = "q\"uote", .ndim = 0}};
    float a[15], b[3] = {1.5f, -2.0f, 1e-30f}, c[1] = {42.0f};
    for (int i = 0; i < 15; i++)
        a[i] = (float)i * 0.25f - 1.0f;
    msr_st_writer_t *w, *w2;
    MSR_CHECK_EQ(msr_st_writer_open(path, spec, 3, 1, &w), MSR_OK);
    /* a second writer (another rank) fills part of the same file */
    MSR_CHECK_EQ(msr_st_writer_open(path, spec, 3, 0, &w2), MSR_OK);
    MSR_CHECK_EQ(msr_st_write_f32(w, 0, 0, 9, a), MSR_OK);
    MSR_CHECK_EQ(msr_st_write_f32(w2, 0, 9, 6, a + 9), MSR_OK);
    MSR_CHECK_EQ(msr_st_write_f32(w2, 1, 0, 3, b), MSR_OK);
    MSR_CHECK_EQ(msr_st_write_f32(w, 2, 0, 1, c), MSR_OK);
    MSR_CHECK_EQ(msr_st_write_f32(w, 1, 1, 3, b), MSR_ERR_INVALID_ARG); /* one past */
    MSR_CHECK_EQ(access(path, F_OK), -1); /* nothing at path before the commit */
    MSR_CHECK_EQ(msr_st_writer_close(w2, 0), MSR_OK);
    MSR_CHECK_EQ(msr_st_writer_close(w, 1), MSR_OK);
    char tmp[140];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    MSR_CHECK_EQ(access(tmp, F_OK), -1);

    msr_st_file_t *f;
    MSR_CHECK_EQ(msr_st_open(path, &f), MSR_OK);
    int n;
    const msr_st_tensor_t *t = msr_st_tensors(f, &n);
    MSR_CHECK_EQ(n, 3);
    MSR_CHECK_STR(t[0].name, "wte"); /* the order given */
    MSR_CHECK_EQ(t[0].shape[0], 5);
    MSR_CHECK_EQ(t[0].shape[1], 3);
    MSR_CHECK_EQ(t[2].ndim, 0);
    MSR_CHECK(msr_st_find(f, "q\"uote") == &t[2]);
    MSR_CHECK(msr_st_find(f, "nope") == NULL);
    float ra[15], rb[3], rc;
    MSR_CHECK_EQ(msr_st_read_f32(f, &t[0], 0, 15, ra), MSR_OK);
    MSR_CHECK(memcmp(ra, a, sizeof a) == 0);
    MSR_CHECK_EQ(msr_st_read_f32(f, &t[0], 14, 1, ra), MSR_OK); /* the last, exactly */
    MSR_CHECK(memcmp(ra, a + 14, 4) == 0);
    MSR_CHECK_EQ(msr_st_read_f32(f, &t[0], 14, 2, ra), MSR_ERR_INVALID_ARG);
    MSR_CHECK_EQ(msr_st_read_f32(f, &t[1], 0, 3, rb), MSR_OK);
    MSR_CHECK(memcmp(rb, b, sizeof b) == 0);
    MSR_CHECK_EQ(msr_st_read_f32(f, &t[2], 0, 1, &rc), MSR_OK);
    MSR_CHECK(rc == 42.0f);
    msr_st_close(f);

    /* the data starts 8-byte aligned, the padding is spaces */
    FILE *fp = fopen(path, "rb");
    unsigned char lenb[8];
    MSR_CHECK(fread(lenb, 1, 8, fp) == 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | lenb[i];
    MSR_CHECK_EQ((8 + hl) % 8, 0);
    MSR_CHECK(fseek(fp, (long)(8 + hl - 1), SEEK_SET) == 0);
    int last = fgetc(fp);
    MSR_CHECK(last == ' ' || last == '}');
    fclose(fp);
    remove_dir();
}

static void test_bf16_and_refused_dtypes(void)
{
    make_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    const char *h = "{\"x\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                    "\"y\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[4,6]}}";
    unsigned char data[6] = {0x80, 0x3f, 0x00, 0xc0, 0, 0x3c}; /* 1.0, -2.0 in bf16 */
    write_file(path, h, strlen(h), strlen(h), data, sizeof data);
    msr_st_file_t *f;
    MSR_CHECK_EQ(msr_st_open(path, &f), MSR_OK);
    float v[2];
    MSR_CHECK_EQ(msr_st_read_f32(f, msr_st_find(f, "x"), 0, 2, v), MSR_OK);
    MSR_CHECK(v[0] == 1.0f && v[1] == -2.0f);
    msr_err_clear();
    MSR_CHECK_EQ(msr_st_read_f32(f, msr_st_find(f, "y"), 0, 1, v), MSR_ERR_UNSUPPORTED);
    MSR_CHECK(strstr(msr_err_msg(), "'y' is F16") != NULL);
    msr_st_close(f);
    remove_dir();
}

static const char *T1 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

/* Each header that lies or breaks the grammar, and the words the error
 * must hold. */
static void test_header_refusals(void)
{
    static const struct {
        const char *json;
        uint64_t data_len;
        const char *says;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         12, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12, "gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7, "past the end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9, "left over"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "F32 x its shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "end before"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}",
         8, "named twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
         "unknown key"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "needs dtype"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}x", 8, "after"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "leading zero"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "non-negative"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "fraction"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551616],\"data_offsets\":[0,8]}}", 8,
         "overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
         "overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "[begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "expected"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, "expected"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "expected"},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, "empty"},
        {"{\"a\\u0000\":{}}", 0, "NUL"},
        {"{\"a\nb\":{}}", 0, "control"},
        {"[]", 0, "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        msr_status_t st = parse(cases[i].json, cases[i].data_len);
        MSR_CHECK_MSG(st == MSR_ERR_CORRUPT, "case %zu (%s): status %d", i, cases[i].json, st);
        MSR_CHECK_MSG(strstr(msr_err_msg(), cases[i].says) != NULL, "case %zu: '%s' lacks '%s'", i,
                      msr_err_msg(), cases[i].says);
    }
    MSR_CHECK_EQ(parse(T1, 8), MSR_OK);
    MSR_CHECK_EQ(parse("{}", 0), MSR_OK);
    MSR_CHECK_EQ(parse("{\"__metadata__\":{\"format\":\"pt\",\"x\":\"\\u00e9\"}}   ", 0), MSR_OK);
    /* zero-element tensors may share an offset */
    MSR_CHECK_EQ(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[0,0]}}",
                       0),
                 MSR_OK);
}

/* Names of MSR_ST_NAME_MAX bytes and shapes of MSR_ST_MAX_DIMS dimensions:
 * at the bound and one past. */
static void test_name_and_dims_bounds(void)
{
    char json[1024], name[MSR_ST_NAME_MAX + 2];
    for (int extra = 0; extra < 2; extra++) {
        memset(name, 'n', sizeof name);
        name[MSR_ST_NAME_MAX + extra] = '\0';
        snprintf(json, sizeof json,
                 "{\"%s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", name);
        MSR_CHECK_EQ(parse(json, 1), extra ? MSR_ERR_CORRUPT : MSR_OK);
    }
    MSR_CHECK_EQ(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1],"
                       "\"data_offsets\":[0,1]}}",
                       1),
                 MSR_OK);
    MSR_CHECK_EQ(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                       "\"data_offsets\":[0,1]}}",
                       1),
                 MSR_ERR_CORRUPT);
    MSR_CHECK(strstr(msr_err_msg(), "at most 8 dimensions") != NULL);
}

static msr_status_t open_status(const char *path)
{
    msr_st_file_t *f = NULL;
    msr_err_clear();
    msr_status_t st = msr_st_open(path, &f);
    msr_st_close(f);
    return st;
}

/* The header length: exactly to the end of the file and one past; at
 * MSR_ST_HEADER_MAX and one past; a file shorter than the length field. */
static void test_header_length_bounds(void)
{
    make_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/h.safetensors", dir);
    write_file(path, "{}", 2, 2, NULL, 0);
    MSR_CHECK_EQ(open_status(path), MSR_OK);
    write_file(path, "{}", 2, 3, NULL, 0);
    MSR_CHECK_EQ(open_status(path), MSR_ERR_CORRUPT);
    MSR_CHECK(strstr(msr_err_msg(), "runs past the end") != NULL);
    MSR_CHECK(strstr(msr_err_msg(), path) != NULL);
    write_file(path, "{}", 2, (uint64_t)MSR_ST_HEADER_MAX + 1, NULL, 0);
    MSR_CHECK_EQ(open_status(path), MSR_ERR_CORRUPT);
    MSR_CHECK(strstr(msr_err_msg(), "more than the") != NULL);
    write_file(path, "{}", 2, UINT64_MAX, NULL, 0);
    MSR_CHECK_EQ(open_status(path), MSR_ERR_CORRUPT);
    write_file(path, "", 0, 0, NULL, 0); /* an empty header is no object */
    MSR_CHECK_EQ(open_status(path), MSR_ERR_CORRUPT);
    FILE *f = fopen(path, "wb");
    MSR_CHECK(fwrite("\x02\0\0\0", 1, 4, f) == 4);
    fclose(f);
    MSR_CHECK_EQ(open_status(path), MSR_ERR_CORRUPT);
    MSR_CHECK(strstr(msr_err_msg(), "too short") != NULL);
    /* MSR_ST_HEADER_MAX exactly: "{}" and spaces */
    char *big = malloc(MSR_ST_HEADER_MAX);
    MSR_CHECK(big != NULL);
    memset(big, ' ', MSR_ST_HEADER_MAX);
    big[0] = '{';
    big[1] = '}';
    f = fopen(path, "wb");
    unsigned char lenb[8] = {0};
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)MSR_ST_HEADER_MAX >> (8 * i));
    MSR_CHECK(fwrite(lenb, 1, 8, f) == 8 &&
              fwrite(big, 1, MSR_ST_HEADER_MAX, f) == MSR_ST_HEADER_MAX);
    fclose(f);
    free(big);
    MSR_CHECK_EQ(open_status(path), MSR_OK);
    MSR_CHECK_EQ(open_status("/nonexistent/x.safetensors"), MSR_ERR_NOT_FOUND);
    remove_dir();
}

/* A file cut short after its header was read: the read says so. */
static void test_truncated_after_open(void)
{
    make_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    write_file(path, T1, strlen(T1), strlen(T1), NULL, 8);
    msr_st_file_t *f;
    MSR_CHECK_EQ(msr_st_open(path, &f), MSR_OK);
    MSR_CHECK(truncate(path, (off_t)(8 + strlen(T1) + 5)) == 0);
    float v[2];
    msr_err_clear();
    MSR_CHECK_EQ(msr_st_read_f32(f, msr_st_find(f, "a"), 0, 2, v), MSR_ERR_TRUNCATED);
    MSR_CHECK(strstr(msr_err_msg(), "'a'") != NULL);
    msr_st_close(f);
    MSR_CHECK_EQ(open_status(path), MSR_ERR_CORRUPT); /* and opened again: past the end */
    remove_dir();
}

/* An aborted writer leaves the file that was at the path as it was. */
static void test_abort_keeps_old(void)
{
    make_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/k.safetensors", dir);
    write_file(path, T1, strlen(T1), strlen(T1), NULL, 8);
    msr_st_tensor_t spec = {.name = "z", .ndim = 1, .shape = {4}};
    msr_st_writer_t *w;
    MSR_CHECK_EQ(msr_st_writer_open(path, &spec, 1, 1, &w), MSR_OK);
    msr_st_writer_abort(w);
    msr_st_file_t *f;
    MSR_CHECK_EQ(msr_st_open(path, &f), MSR_OK);
    MSR_CHECK(msr_st_find(f, "a") != NULL);
    msr_st_close(f);
    char tmp[140];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    MSR_CHECK_EQ(access(tmp, F_OK), -1);
    remove_dir();
}

static const msr_test_t tests[] = {
    {"roundtrip", test_roundtrip, 30},
    {"bf16_and_refused_dtypes", test_bf16_and_refused_dtypes, 30},
    {"header_refusals", test_header_refusals, 30},
    {"name_and_dims_bounds", test_name_and_dims_bounds, 30},
    {"header_length_bounds", test_header_length_bounds, 60},
    {"truncated_after_open", test_truncated_after_open, 30},
    {"abort_keeps_old", test_abort_keeps_old, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}

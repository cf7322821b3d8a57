/* Fuzzing the safetensors header parser (model/safetensors.h): the input is
 * a whole file (u64 header length, the header, the data section). When the
 * length fits, the header is parsed against the data that follows; when it
 * is accepted, what the reader relies on must hold: every tensor's bytes
 * equal its dtype size x its shape, inside the data section, the tensors
 * tiling it without gap or overlap, names unique and NUL-terminated.
 * Built two ways, as fuzz_coord: with libFuzzer (MSRUN_FUZZ=ON, clang):
 * fuzz_safetensors [corpus dirs]; as a replay driver in every build:
 * fuzz_safetensors_replay FILE|DIR... */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "model/safetensors.h"

static void broken(const char *what, const msr_st_tensor_t *t)
{
    fprintf(stderr, "fuzz_safetensors: accepted a header where %s (tensor '%s')\n", what,
            t != NULL ? t->name : "");
    abort();
}

/* The invariants of an accepted header of n tensors over data_len bytes. */
static void check(const msr_st_tensor_t *t, int n, uint64_t data_len)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (memchr(t[i].name, '\0', sizeof t[i].name) == NULL || t[i].name[0] == '\0')
            broken("a name is empty or unterminated", &t[i]);
        if (t[i].ndim < 0 || t[i].ndim > MSR_ST_MAX_DIMS)
            broken("the dimensions are out of range", &t[i]);
        if (t[i].end < t[i].begin || t[i].end > data_len)
            broken("the offsets leave the data section", &t[i]);
        if (t[i].end - t[i].begin != msr_st_dtype_size(t[i].dtype) * msr_st_tensor_elems(&t[i]))
            broken("the bytes are not dtype size x shape", &t[i]);
        total += t[i].end - t[i].begin;
        for (int j = 0; j < i; j++) {
            if (strcmp(t[i].name, t[j].name) == 0)
                broken("a name is used twice", &t[i]);
            if (t[i].begin < t[j].end && t[j].begin < t[i].end)
                broken("two tensors overlap", &t[i]);
        }
    }
    if (total != data_len)
        broken("the tensors do not cover the data section", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | data[i];
    if (n > size - 8 || n > MSR_ST_HEADER_MAX)
        return 0;
    msr_st_tensor_t *t = NULL;
    int count = 0;
    uint64_t data_len = size - 8 - n;
    if (msr_st_parse_header((const char *)data + 8, (size_t)n, data_len, &t, &count) == MSR_OK) {
        check(t, count, data_len);
        msr_free(t);
    }
    return 0;
}

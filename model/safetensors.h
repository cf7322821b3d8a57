/* The safetensors format (Hugging Face's, read and written from its
 * specification): a reader that parses and checks the header strictly and
 * reads one tensor's bytes at a time, and a writer that lays a file out
 * and lets ranks fill their parts of it.
 *
 *   file = u64 N (little-endian) | header: N bytes of JSON | data section
 *   header = {"NAME": {"dtype": "F32", "shape": [r, c],
 *                      "data_offsets": [begin, end]}, ...,
 *             "__metadata__": {"key": "string value", ...}}  (optional)
 *
 * data_offsets are [begin, end) in the data section; the tensors must
 * cover it exactly, contiguous and without overlap; each holds dtype size x
 * the product of its shape bytes, row-major, little-endian. The header may
 * end with spaces (the writer pads it so the data starts 8-byte aligned).
 *
 * Nothing here keeps global state; a reader or writer is used by one
 * thread at a time. */
#ifndef MSR_MODEL_SAFETENSORS_H
#define MSR_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

/* The largest header accepted, in bytes (the reference reader's limit). */
#define MSR_ST_HEADER_MAX 100000000u
/* The longest tensor name, in bytes (after JSON unescaping). */
#define MSR_ST_NAME_MAX   255
/* The most dimensions a tensor may have. */
#define MSR_ST_MAX_DIMS   8

/* The dtypes the format names; the reader converts F32 and BF16 to float,
 * the others are parsed (so a file holding them opens) but not read. */
typedef enum msr_st_dtype {
    MSR_ST_F32,
    MSR_ST_BF16,
    MSR_ST_F16,
    MSR_ST_F64,
    MSR_ST_I64,
    MSR_ST_I32,
    MSR_ST_I16,
    MSR_ST_I8,
    MSR_ST_U64,
    MSR_ST_U32,
    MSR_ST_U16,
    MSR_ST_U8,
    MSR_ST_BOOL,
    MSR_ST_F8_E4M3,
    MSR_ST_F8_E5M2,
    MSR_ST_DTYPES
} msr_st_dtype_t;

/* The dtype's name as the header writes it ("F32"). */
const char *msr_st_dtype_name(msr_st_dtype_t d);
/* Bytes per element. */
size_t msr_st_dtype_size(msr_st_dtype_t d);

/* One tensor of a header. */
typedef struct msr_st_tensor {
    char name[MSR_ST_NAME_MAX + 1];
    msr_st_dtype_t dtype;
    int ndim; /* 0 (a scalar) .. MSR_ST_MAX_DIMS */
    uint64_t shape[MSR_ST_MAX_DIMS];
    uint64_t begin, end; /* [begin, end) in the data section */
} msr_st_tensor_t;

/* The elements of a tensor (the product of its shape; 1 for a scalar). */
uint64_t msr_st_tensor_elems(const msr_st_tensor_t *t);

/* Parses and checks a header: json (len bytes, not NUL-terminated) against
 * a data section of data_len bytes. Strict: well-formed JSON of the format's
 * shape only (an object of tensor objects with exactly the keys dtype,
 * shape and data_offsets, and an optional "__metadata__" object of string
 * values), trailing spaces allowed, nothing else after it; names unique,
 * non-empty and at most MSR_ST_NAME_MAX bytes; a known dtype; byte counts
 * equal to dtype size x shape product (overflow-checked); the tensors
 * covering [0, data_len) contiguously. On success *tensors_p (msr_free it)
 * holds *n_p tensors in the header's order. Errors: MSR_ERR_CORRUPT (the
 * reason, with the tensor's name where there is one, in the error text),
 * MSR_ERR_NO_MEMORY. Pure: no I/O, so it can be fuzzed. */
msr_status_t msr_st_parse_header(const char *json, size_t len, uint64_t data_len,
                                 msr_st_tensor_t **tensors_p, int *n_p);

/* ---- reading ---- */

typedef struct msr_st_file msr_st_file_t;

/* Opens path and parses its header (msr_st_parse_header); the data is not
 * read. Errors: MSR_ERR_NOT_FOUND, MSR_ERR_PERMISSION, MSR_ERR_IO,
 * MSR_ERR_CORRUPT (a header length past the file or above
 * MSR_ST_HEADER_MAX, a bad header), MSR_ERR_NO_MEMORY; the error text
 * names the file. */
msr_status_t msr_st_open(const char *path, msr_st_file_t **f_p);
void msr_st_close(msr_st_file_t *f);

/* The file's tensors, in the header's order. */
const msr_st_tensor_t *msr_st_tensors(const msr_st_file_t *f, int *n_p);
/* The tensor named name, or NULL. */
const msr_st_tensor_t *msr_st_find(const msr_st_file_t *f, const char *name);

/* Reads elements [first, first + count) of t (row-major) into dst as
 * float: F32 as is, BF16 widened. Reads those bytes only (pread).
 * Errors: MSR_ERR_UNSUPPORTED (another dtype), MSR_ERR_INVALID_ARG (a range
 * past the tensor), MSR_ERR_TRUNCATED (the file shrank), MSR_ERR_IO; the
 * error text names the file and the tensor. */
msr_status_t msr_st_read_f32(const msr_st_file_t *f, const msr_st_tensor_t *t, uint64_t first,
                             uint64_t count, float *dst);

/* ---- writing ---- */

typedef struct msr_st_writer msr_st_writer_t;

/* Lays out a file of n F32 tensors (name, ndim and shape of each; dtype,
 * begin and end are set here) in the order given, data 8-byte aligned,
 * and opens its temporary file path + ".tmp". create != 0: writes the
 * header and sizes the file (one process does this first); create == 0:
 * opens the temporary file another process created (for ranks that each
 * write their part). Errors: MSR_ERR_INVALID_ARG (a bad name or shape),
 * MSR_ERR_IO (the error text names the file), MSR_ERR_NO_MEMORY. */
msr_status_t msr_st_writer_open(const char *path, const msr_st_tensor_t *tensors, int n, int create,
                                msr_st_writer_t **w_p);

/* Writes count floats to elements [first, first + count) of tensor k
 * (pwrite; any thread-free order). Errors: MSR_ERR_INVALID_ARG, MSR_ERR_IO. */
msr_status_t msr_st_write_f32(msr_st_writer_t *w, int k, uint64_t first, uint64_t count,
                              const float *src);

/* Makes what this process wrote durable (fsync) and closes the file;
 * commit != 0 (the creator, after every writer synced): renames the
 * temporary file over path and syncs the directory, so path is either the
 * old file or the whole new one. The writer is freed either way. */
msr_status_t msr_st_writer_close(msr_st_writer_t *w, int commit);

/* Closes and removes the temporary file (a failed export). NULL: nothing. */
void msr_st_writer_abort(msr_st_writer_t *w);

#endif

/* What model/data.c and model/data_tokens.c share; private to them. */
#ifndef MSR_MODEL_DATA_IMPL_H
#define MSR_MODEL_DATA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "model/data.h"

/* Whether the len bytes of a file start like a token file (its magic). */
int msr_data_is_tokens(const uint8_t *file, size_t len);

/* Checks the token file's header (the file's len bytes at file, path for
 * the messages) and fills ds's bytes, size, width and vocab. Errors:
 * MSR_ERR_INVALID_ARG, the text naming the path and what is wrong. */
msr_status_t msr_data_tokens_parse(const char *path, const uint8_t *file, size_t len,
                                   msr_dataset_t *ds);

#endif

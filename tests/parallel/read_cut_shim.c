/* A preload library for the checkpoint tests (LD_PRELOAD): the file whose
 * path ends with $MSR_TEST_CUT_FILE reads as if it ended at file byte
 * $MSR_TEST_CUT_AT (pread: a short read, then 0), a file cut short after
 * the reader opened it and checked its length; with $MSR_TEST_CUT_EIO
 * set, a read past that byte fails with EIO instead. Every other file,
 * and every call when the variables are unset, reads as it is. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);

/* Where fd's file ends for its reads: -1 when it is not the file cut. */
static off_t cut_at(int fd)
{
    const char *name = getenv("MSR_TEST_CUT_FILE"), *at = getenv("MSR_TEST_CUT_AT");
    char link[64], path[4096];
    if (name == NULL || at == NULL)
        return -1;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0)
        return -1;
    path[n] = '\0';
    size_t pl = (size_t)n, nl = strlen(name);
    if (pl < nl || strcmp(path + pl - nl, name) != 0)
        return -1;
    return (off_t)strtoll(at, NULL, 10);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset)
{
    pread_fn next = (pread_fn)(void (*)(void))dlsym(RTLD_NEXT, "pread64");
    off_t end = cut_at(fd);
    if (end < 0 || offset + (off_t)count <= end)
        return next(fd, buf, count, offset);
    if (getenv("MSR_TEST_CUT_EIO") != NULL) {
        errno = EIO;
        return -1;
    }
    if (offset >= end)
        return 0;
    /* read as asked (an O_DIRECT file takes aligned lengths only), then
     * cut: the bytes past end are not there */
    ssize_t got = next(fd, buf, count, offset);
    return got > (ssize_t)(end - offset) ? (ssize_t)(end - offset) : got;
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset)
{
    return pread64(fd, buf, count, offset);
}

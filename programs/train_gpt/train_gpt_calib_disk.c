/* train_gpt --calibrate's disk rates (disk_read_gbs, disk_write_gbs): the
 * offload directory measured the way the offloads use it. Each rank, all
 * at once as in training, writes a file of its own there in the offload's
 * default chunks (0600, O_EXCL, O_DIRECT where the filesystem takes it, as
 * parallel/offload.c opens its stores), syncs it to the disk, reads it
 * back and removes it; the slowest rank's rates are every rank's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/time.h"
#include "parallel/offload.h"
#include "programs/train_gpt/train_gpt_calib.h"

/* A file large enough that a drive's cache and the calls' fixed costs are
 * a small part of its time, small enough to take well under a second on
 * a drive that writes 1 GB/s; a short job's a quarter of it. */
#define CALIB_DISK_BYTES ((size_t)64 << 20)

/* Opens a new file of this rank's under dir into *fd_p: O_DIRECT where
 * taken. Returns 0, or -1 with the reason printed. */
static int open_new(const char *dir, int rank, char *path, size_t len, int *fd_p)
{
    int n = snprintf(path, len, "%s/msrun-calib-disk-rank%d-%ld.bin", dir, rank, (long)getpid());
    if (n < 0 || (size_t)n >= len) {
        fprintf(stderr, "train_gpt: --calibrate: --offload-dir %s: path too long\n", dir);
        return -1;
    }
    int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = open(path, flags | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) /* no O_DIRECT here: the offloads go through the page cache */
        fd = open(path, flags, 0600);
    if (fd < 0) {
        fprintf(stderr, "train_gpt: --calibrate: --offload-dir: cannot create %s: %s\n", path,
                strerror(errno));
        return -1;
    }
    *fd_p = fd;
    return 0;
}

/* Writes (write) or reads bytes of fd in chunks of buf's, seconds into
 * *s_p (the write synced to the disk). Returns 0, or -1 with the reason. */
static int pass(int fd, const char *path, int write, void *buf, size_t bytes, double *s_p)
{
    const size_t chunk = MSR_OFFLOAD_CHUNK_DEFAULT;
    uint64_t t0 = msr_now_ns();
    for (size_t at = 0; at < bytes; at += chunk) {
        ssize_t n = write ? pwrite(fd, buf, chunk, (off_t)at) : pread(fd, buf, chunk, (off_t)at);
        if (n != (ssize_t)chunk) {
            fprintf(stderr, "train_gpt: --calibrate: %s %s at byte %zu: %s\n",
                    write ? "writing" : "reading", path, at,
                    n < 0 ? strerror(errno) : "short transfer (a full disk?)");
            return -1;
        }
    }
    if (write && fdatasync(fd) != 0) {
        fprintf(stderr, "train_gpt: --calibrate: syncing %s: %s\n", path, strerror(errno));
        return -1;
    }
    *s_p = (double)(msr_now_ns() - t0) * 1e-9;
    return 0;
}

/* This rank's rates, GB/s, or -1 with the reason printed. */
static int measure(const options_t *o, int rank, double *read_gbs, double *write_gbs)
{
    size_t bytes = calib_short(o) ? CALIB_DISK_BYTES / 4 : CALIB_DISK_BYTES;
    void *buf = NULL;
    if (posix_memalign(&buf, MSR_OFFLOAD_ALIGN, MSR_OFFLOAD_CHUNK_DEFAULT) != 0) {
        fprintf(stderr, "train_gpt: --calibrate: out of memory for the disk's chunk\n");
        return -1;
    }
    calib_fill(buf, MSR_OFFLOAD_CHUNK_DEFAULT / sizeof(float), (size_t)rank);
    char path[4200];
    int fd = -1, rc = -1;
    double ws = 0, rs = 0;
    if (open_new(o->offload_dir, rank, path, sizeof path, &fd) == 0) {
        if (pass(fd, path, 1, buf, bytes, &ws) == 0 && pass(fd, path, 0, buf, bytes, &rs) == 0)
            rc = 0;
        close(fd);
        if (unlink(path) != 0) {
            fprintf(stderr, "train_gpt: --calibrate: removing %s: %s\n", path, strerror(errno));
            rc = -1;
        }
    }
    free(buf);
    /* a pass too quick for the clock is as fast as the model can tell */
    *write_gbs = rc == 0 ? (double)bytes / (ws > 1e-6 ? ws : 1e-6) * 1e-9 : 0;
    *read_gbs = rc == 0 ? (double)bytes / (rs > 1e-6 ? rs : 1e-6) * 1e-9 : 0;
    return rc;
}

int calib_disk(const options_t *o, msr_comm_t *comm, int rank, calib_t *k)
{
    if (o->offload_dir == NULL)
        return 0;
    double r[2] = {0, 0};
    int mine = measure(o, rank, &r[0], &r[1]);
    msr_status_t st;
    /* every rank's slowest, and a rank that failed (0) fails them all */
    if (comm != NULL &&
        (st = msr_comm_allreduce(comm, MSR_IN_PLACE, r, 2, MSR_DTYPE_F64, MSR_OP_MIN)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --calibrate: the disk rates: %s: %s\n", msr_status_str(st),
                msr_last_error());
        return -1;
    }
    if (!(r[0] > 0 && r[1] > 0)) {
        if (mine == 0)
            fprintf(stderr, "train_gpt: --calibrate: another rank could not measure the disk\n");
        return -1;
    }
    k->c.disk_read_gbs = r[0];
    k->c.disk_write_gbs = r[1];
    k->measured |= 1u << CALIB_DISK;
    return 0;
}

/* The coordinator's state file: a snapshot of the job (members, generation,
 * restart count, failure and failure history, store, recent writes' answers) followed by a log
 * of changes, each a framed record with its length, sequence number and CRCs. A save appends
 * what changed since the last one and fdatasyncs it (unless the config's
 * state_sync_process says the kernel is far enough); once the log has grown
 * past a few times the snapshot, the snapshot is rewritten atomically
 * (temporary file, fsync, rename, fsync of the directory). A coordinator
 * restarted on the same file reads the snapshot and replays the log. A
 * record torn or failing a CRC with nothing whole after it is a save cut
 * short by a crash, and is cut off; any other bad record (out of sequence,
 * not parsing, or with a whole record anywhere after it) is corruption: the
 * file is refused and left untouched, unless state_repair says to cut it
 * there. Waits in progress (barriers, allgathers, long polls) are not
 * kept: their clients retry.
 *
 * Layout (integers little-endian):
 *   "MSRSTAT3"                        8 bytes
 *   record: u32 length, u32 sequence number (the snapshot 0, then 1, 2, ...),
 *           u32 CRC-32 of the payload, u32 CRC-32 of the 12 bytes before,
 *           payload
 *   the first record's payload is a PersistedState, the others'
 *   PersistedChange (rendezvous/msrun.proto). The header's own CRC lets a
 *   reader find whole records after a bad one in one pass; the sequence
 *   number tells records swapped, dropped or repeated.
 * Files of the format before ("MSRSTAT2", records of u32 length and u32
 * CRC-32 of the payload) are read, and rewritten at the first save; etcd's
 * values (persist_etcd.c) are records of that older frame.
 *
 * This header, the format, is private to persist.c (writing) and
 * persist_load.c (reading). */
#ifndef MSR_CLUSTER_PERSIST_IMPL_H
#define MSR_CLUSTER_PERSIST_IMPL_H

#include <stdint.h>

#include "cluster/coord_internal.h"

#define MAGIC      "MSRSTAT3"
#define MAGIC_V2   "MSRSTAT2"
#define MAGIC_LEN  8
#define FRAME_LEN  8          /* "MSRSTAT2" files and etcd values: length, CRC */
#define FRAME3_LEN 16         /* length, sequence number, payload CRC, header CRC */
#define RECORD_MAX (1u << 30) /* a longer record is corrupt */

static inline const char *state_path(const msr_coord_t *c)
{
    const char *p = c->config.state_file;
    return p && *p ? p : NULL;
}

static inline int use_etcd(const msr_coord_t *c)
{
    return c->config.etcd_endpoints && *c->config.etcd_endpoints;
}

static inline uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif

/* CRC-32 by slicing-by-8: eight tables, each giving a byte's contribution
 * from 0..7 bytes further on, so a step folds 8 bytes with 8 lookups and
 * no dependency between them but the final XOR (about 5x a byte at a time:
 * a byte at a time was slower than the disk for checkpoints). */
#include "base/crc32.h"

#include <pthread.h>

static uint32_t slice_table[8][256];
static pthread_once_t slice_once = PTHREAD_ONCE_INIT;

static void slice_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        slice_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++)
            slice_table[t][i] =
                (slice_table[t - 1][i] >> 8) ^ slice_table[0][slice_table[t - 1][i] & 0xff];
}

/* The 4 bytes at p as a little-endian number, whatever the host's order. */
static uint32_t load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t msr_crc32(uint32_t crc, const void *data, size_t len)
{
    const uint32_t(*t)[256] = (const uint32_t(*)[256])slice_table;
    const unsigned char *p = data;
    pthread_once(&slice_once, slice_init);
    crc = ~crc;
    for (; len >= 8; len -= 8, p += 8) {
        uint32_t lo = load_le32(p) ^ crc, hi = load_le32(p + 4);
        crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
              t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    }
    while (len--)
        crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* The Zarr reader's pieces (formats/zarr/): CRC-32C against published check values, and the
 * sharding index: entries at the start or the end, a checksum, a missing inner chunk, a shard
 * cut short, an entry beyond the shard. */
#include <stdint.h>
#include <string.h>

#include "crc32c.h"
#include "zarr_shard.h"
#include "unit.h"

static void test_crc32c_vectors(void)
{
    /* RFC 3720 (iSCSI) B.4 and the common "123456789" check value */
    CHECK(cfs_crc32c("123456789", 9) == 0xE3069283u);
    CHECK(cfs_crc32c("", 0) == 0);
    unsigned char zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xFF, sizeof ones);
    for (int i = 0; i < 32; i++)
        inc[i] = (unsigned char)i;
    CHECK(cfs_crc32c(zeros, 32) == 0x8A9136AAu);
    CHECK(cfs_crc32c(ones, 32) == 0x62A8AB43u);
    CHECK(cfs_crc32c(inc, 32) == 0x46DD794Eu);
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* A shard of two inner chunks: "abc" and a missing one, index at start or end with crc. */
static size_t make_shard(unsigned char *buf, bool at_start)
{
    size_t isize = 2 * 16 + 4, data_at = at_start ? isize : 0;
    unsigned char *ix = buf + (at_start ? 0 : 3);
    memcpy(buf + data_at, "abc", 3);
    put64(ix, data_at);
    put64(ix + 8, 3);
    put64(ix + 16, UINT64_MAX);
    put64(ix + 24, UINT64_MAX);
    put32(ix + 32, cfs_crc32c(ix, 32));
    return isize + 3;
}

static void test_shard_index(void)
{
    unsigned char buf[64];
    uint64_t off, n;
    cfs_err err = {0};
    for (int start = 0; start < 2; start++) {
        size_t len = make_shard(buf, start);
        CHECK(zr_shard_locate(buf, len, 2, 0, start, true, &off, &n, &err) == 1);
        CHECK(n == 3 && memcmp(buf + off, "abc", 3) == 0);
        CHECK(zr_shard_locate(buf, len, 2, 1, start, true, &off, &n, &err) == 0);
        /* cut short: shorter than the index */
        CHECK(zr_shard_locate(buf, 20, 2, 0, start, true, &off, &n, &err) == -1);
        CHECK(strstr(err.msg, "truncated") != NULL);
        /* a flipped index byte fails the checksum */
        buf[start ? 1 : 4] ^= 1;
        CHECK(zr_shard_locate(buf, len, 2, 0, start, true, &off, &n, &err) == -1);
        CHECK(strstr(err.msg, "crc32c") != NULL);
    }
    /* no checksum; an entry reaching past the end */
    unsigned char ix[16];
    put64(ix, 0);
    put64(ix + 8, 1000);
    CHECK(zr_shard_locate(ix, sizeof ix, 1, 0, true, false, &off, &n, &err) == -1);
    CHECK(strstr(err.msg, "beyond") != NULL);
    /* an index bigger than memory could hold */
    CHECK(zr_shard_locate(ix, sizeof ix, UINT64_MAX / 8, 0, true, false, &off, &n, &err) == -1);
}

void unit_zarr_input(void)
{
    test_crc32c_vectors();
    test_shard_index();
}

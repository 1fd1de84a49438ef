/* See zarr_zipprobe.h. Only the first ZR_PROBE_CDIR bytes of a central directory are looked
 * at: ZipStore and Info-ZIP write the root's metadata among the first entries. */
#include "zarr_zipprobe.h"
#include "zarr_backend.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ZR_PROBE_TAIL (65535 + 22 + 20)
#define ZR_PROBE_CDIR ((size_t)4 << 20)

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* Where the central directory is: 0 with *off and *size, -1 if the tail holds no end record. */
static int cdir_place(cfs_probe_input *in, uint64_t *off, uint64_t *size)
{
    uint64_t fsize = cfs_probe_size(in);
    size_t tl = fsize < ZR_PROBE_TAIL ? (size_t)fsize : ZR_PROBE_TAIL;
    unsigned char *tail = malloc(tl ? tl : 1);
    if (!tail || cfs_probe_read(in, fsize - tl, tail, tl) != (ssize_t)tl) {
        free(tail);
        return -1;
    }
    int rc = -1;
    for (size_t i = tl >= 22 ? tl - 22 + 1 : 0; i-- > 0;) {
        if (le32(tail + i) != 0x06054b50)
            continue;
        *size = le32(tail + i + 12);
        *off = le32(tail + i + 16);
        rc = 0;
        if ((*off == 0xFFFFFFFFu || *size == 0xFFFFFFFFu) && i >= 20 &&
            le32(tail + i - 20) == 0x07064b50) {
            unsigned char z[56];
            if (cfs_probe_read(in, le64(tail + i - 12), z, sizeof z) == (ssize_t)sizeof z &&
                le32(z) == 0x06064b50) {
                *size = le64(z + 40);
                *off = le64(z + 48);
            } else {
                rc = -1;
            }
        }
        break;
    }
    free(tail);
    return rc;
}

bool zr_zip_probe(cfs_probe_input *in)
{
    size_t hl;
    const unsigned char *head = cfs_probe_head(in, &hl);
    if (cfs_probe_is_dir(in) || hl < 4 || memcmp(head, "PK\3\4", 4) != 0)
        return false;
    uint64_t off, size;
    if (cdir_place(in, &off, &size) < 0)
        return false;
    size_t n = size < ZR_PROBE_CDIR ? (size_t)size : ZR_PROBE_CDIR;
    unsigned char *cd = malloc(n ? n : 1);
    ssize_t got = cd ? cfs_probe_read(in, off, cd, n) : -1;
    bool yes = false;
    for (size_t at = 0; got > 0 && at + 46 <= (size_t)got && !yes;) {
        if (le32(cd + at) != 0x02014b50)
            break;
        size_t nl = (size_t)cd[at + 28] | (size_t)cd[at + 29] << 8;
        size_t xl = (size_t)cd[at + 30] | (size_t)cd[at + 31] << 8;
        size_t cl = (size_t)cd[at + 32] | (size_t)cd[at + 33] << 8;
        if (at + 46 + nl > (size_t)got)
            break;
        yes = zr_backend_root_meta_name((const char *)cd + at + 46, nl);
        at += 46 + nl + xl + cl;
    }
    free(cd);
    return yes;
}

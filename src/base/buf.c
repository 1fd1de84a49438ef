#include "buf.h"

#include <stdlib.h>
#include <string.h>

int cfs_buf_reserve(cfs_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len)
        return -1;
    size_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    /* The first reservation is exact: a buffer filled once (a file's or a chunk's bytes, whose
     * size is known) holds no slack; one that keeps growing doubles from there. */
    size_t cap = b->cap ? b->cap : need < 256 ? 256 : need;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    unsigned char *grown = realloc(b->data, cap);
    if (!grown)
        return -1;
    b->data = grown;
    b->cap = cap;
    return 0;
}

int cfs_buf_append(cfs_buf *b, const void *data, size_t len)
{
    if (cfs_buf_reserve(b, len) < 0)
        return -1;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

int cfs_buf_append_u32le(cfs_buf *b, uint32_t v)
{
    unsigned char le[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, (v >> 24) & 0xff};
    return cfs_buf_append(b, le, 4);
}

void cfs_buf_reset(cfs_buf *b)
{
    b->len = 0;
}

void cfs_buf_free(cfs_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

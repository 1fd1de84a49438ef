/* A growable byte buffer. */
#ifndef CFS_BUF_H
#define CFS_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct cfs_buf {
    unsigned char *data;
    size_t len;
    size_t cap;
} cfs_buf;

/* Ensures room for `extra` more bytes; -1 on allocation failure. */
int cfs_buf_reserve(cfs_buf *b, size_t extra);
int cfs_buf_append(cfs_buf *b, const void *data, size_t len);
int cfs_buf_append_u32le(cfs_buf *b, uint32_t v);
void cfs_buf_reset(cfs_buf *b);
void cfs_buf_free(cfs_buf *b);

#endif

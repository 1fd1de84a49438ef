/* numcodecs' vlen-utf8 framing: u32le count, then per item u32le byte length + UTF-8 bytes. */
#ifndef CFS_VLEN_H
#define CFS_VLEN_H

#include <stddef.h>

#include "buf.h"
#include "error.h"

/* Frames n strings (NULL entries are written as ""); invalid UTF-8 is replaced by U+FFFD so
 * every client's decoder accepts the chunk. */
int cfs_vlen_encode(char *const *strings, size_t n, cfs_buf *out, cfs_err *err);
/* Parses a framed buffer into n malloc'd strings (for tests); *n_out receives the count. */
int cfs_vlen_decode(const unsigned char *in, size_t len, char ***strings_out, size_t *n_out,
                    cfs_err *err);

#endif

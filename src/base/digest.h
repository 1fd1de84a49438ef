/* Message digests S3 asks for: MD5 (an object's ETag) and SHA-256 (the SigV4 payload hash). */
#ifndef CFS_DIGEST_H
#define CFS_DIGEST_H

#include <stddef.h>

enum { CFS_MD5_HEX = 33, CFS_SHA256_HEX = 65 };

/* The lower-case hex digest of data into hex (NUL-terminated). */
void cfs_md5_hex(const void *data, size_t len, char hex[CFS_MD5_HEX]);
void cfs_sha256_hex(const void *data, size_t len, char hex[CFS_SHA256_HEX]);

#endif

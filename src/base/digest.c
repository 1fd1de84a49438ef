#include "digest.h"

#include <openssl/evp.h>

static void digest_hex(const EVP_MD *md, const void *data, size_t len, char *hex)
{
    unsigned char raw[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    static const char digits[] = "0123456789abcdef";
    if (!EVP_Digest(data, len, raw, &n, md, NULL))
        n = 0; /* only on allocation failure: an empty digest never matches an ETag */
    for (unsigned int i = 0; i < n; i++) {
        hex[2 * i] = digits[raw[i] >> 4];
        hex[2 * i + 1] = digits[raw[i] & 15];
    }
    hex[2 * n] = '\0';
}

void cfs_md5_hex(const void *data, size_t len, char hex[CFS_MD5_HEX])
{
    digest_hex(EVP_md5(), data, len, hex);
}

void cfs_sha256_hex(const void *data, size_t len, char hex[CFS_SHA256_HEX])
{
    digest_hex(EVP_sha256(), data, len, hex);
}

#include "vlen.h"

#include "utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int append_utf8(cfs_buf *out, const char *str)
{
    static const unsigned char replacement[3] = {0xef, 0xbf, 0xbd};
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);
    /* Readers hand on valid UTF-8 nearly always: then the item is its length and one copy. */
    if (n <= UINT32_MAX && cfs_utf8_valid(s, n))
        return cfs_buf_append_u32le(out, (uint32_t)n) < 0 ? -1 : cfs_buf_append(out, s, n);
    size_t len_at = out->len;
    if (cfs_buf_append_u32le(out, 0) < 0)
        return -1;
    size_t start = out->len;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = cfs_utf8_decode(s + i, n - i, &cp);
        if (k == 0) {
            if (cfs_buf_append(out, replacement, 3) < 0)
                return -1;
            i++;
        } else {
            if (cfs_buf_append(out, s + i, k) < 0)
                return -1;
            i += k;
        }
    }
    size_t written = out->len - start;
    if (written > UINT32_MAX)
        return -1;
    unsigned char *p = out->data + len_at;
    p[0] = written & 0xff;
    p[1] = (written >> 8) & 0xff;
    p[2] = (written >> 16) & 0xff;
    p[3] = (written >> 24) & 0xff;
    return 0;
}

int cfs_vlen_encode(char *const *strings, size_t n, cfs_buf *out, cfs_err *err)
{
    if (n > UINT32_MAX)
        return cfs_err_set(err, "too many strings in one chunk");
    if (cfs_buf_append_u32le(out, (uint32_t)n) < 0)
        return cfs_err_setc(err, CFS_ENOMEM, "out of memory framing strings");
    for (size_t i = 0; i < n; i++)
        if (append_utf8(out, strings[i] ? strings[i] : "") < 0)
            return cfs_err_setc(err, CFS_ENOMEM, "out of memory framing strings");
    return 0;
}

static uint32_t read_u32le(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int cfs_vlen_decode(const unsigned char *in, size_t len, char ***strings_out, size_t *n_out,
                    cfs_err *err)
{
    if (len < 4)
        return cfs_err_set(err, "vlen-utf8 buffer shorter than its header");
    uint32_t n = read_u32le(in);
    /* Each item needs at least its 4-byte length: reject counts the buffer cannot hold. */
    if (n > (len - 4) / 4)
        return cfs_err_set(err, "vlen-utf8 item count %u exceeds the buffer", n);
    char **strings = calloc(n ? n : 1, sizeof *strings);
    if (!strings)
        return cfs_err_oom(err);
    size_t pos = 4;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = pos + 4 <= len ? read_u32le(in + pos) : UINT32_MAX;
        if (k == UINT32_MAX || k > len - pos - 4) {
            for (uint32_t j = 0; j < i; j++)
                free(strings[j]);
            free(strings);
            return cfs_err_set(err, "vlen-utf8 item %u overruns the buffer", i);
        }
        pos += 4;
        strings[i] = malloc((size_t)k + 1);
        if (!strings[i]) {
            for (uint32_t j = 0; j < i; j++)
                free(strings[j]);
            free(strings);
            return cfs_err_oom(err);
        }
        memcpy(strings[i], in + pos, k);
        strings[i][k] = '\0';
        pos += k;
    }
    *strings_out = strings;
    *n_out = n;
    return 0;
}

#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t cfs_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    size_t len;
    uint32_t v;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if ((s[0] & 0xe0) == 0xc0) { len = 2; v = s[0] & 0x1f; }
    else if ((s[0] & 0xf0) == 0xe0) { len = 3; v = s[0] & 0x0f; }
    else if ((s[0] & 0xf8) == 0xf0) { len = 4; v = s[0] & 0x07; }
    else return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min_cp[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

/* Bytes of s before its first non-ASCII byte, eight at a time: almost every string a reader
 * meets (cell barcodes, gene ids) is ASCII. */
static size_t ascii_prefix(const unsigned char *s, size_t n)
{
    size_t i = 0;
    for (uint64_t w; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        if (w & UINT64_C(0x8080808080808080))
            break;
    }
    while (i < n && s[i] < 0x80)
        i++;
    return i;
}

bool cfs_utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = ascii_prefix(s, n); i < n; i += ascii_prefix(s + i, n - i)) {
        uint32_t cp;
        size_t k = cfs_utf8_decode(s + i, n - i, &cp);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

size_t cfs_utf8_put(char *out, uint32_t cp)
{
    unsigned char *o = (unsigned char *)out;
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

char *cfs_text_to_utf8(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    bool valid = cfs_utf8_valid(u, len);
    char *out = malloc(valid ? len + 1 : 2 * len + 1);
    if (!out)
        return NULL;
    if (valid) {
        memcpy(out, s, len);
        out[len] = '\0';
        return out;
    }
    size_t j = 0;
    for (size_t i = 0; i < len; i++)
        j += cfs_utf8_put(out + j, u[i]);
    out[j] = '\0';
    return out;
}

char *cfs_text_shown(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(4 * n + 1);
    if (!out)
        return NULL;
    const unsigned char *u = (const unsigned char *)s;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t len = cfs_utf8_decode(u + i, n - i, &cp);
        if (len == 0 || cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) {
            /* A byte that is not UTF-8, or a control character: its bytes written out. */
            size_t k = len ? len : 1;
            for (size_t b = 0; b < k; b++)
                j += (size_t)sprintf(out + j, "\\x%02X", u[i + b]);
            i += k;
        } else {
            memcpy(out + j, u + i, len);
            j += len;
            i += len;
        }
    }
    out[j] = '\0';
    return out;
}

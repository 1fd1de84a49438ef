#include "cellucid_text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

static bool glyphless(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x200b && cp <= 0x200f) ||
           (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2064) || cp == 0xfeff;
}

static bool white_space(uint32_t cp)
{
    return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

bool cfs_cellucid_text_ok(const char *s, bool may_be_empty)
{
    size_t n = strlen(s);
    if (n == 0)
        return may_be_empty;
    uint32_t cp = 0;
    for (size_t i = 0; i < n;) {
        size_t len = cfs_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (len == 0 || glyphless(cp) || (i == 0 && white_space(cp)))
            return false;
        i += len;
    }
    return !white_space(cp);
}

char *cfs_cellucid_text_from(const char *s)
{
    char *utf8 = cfs_text_to_utf8(s, strlen(s));
    if (!utf8)
        return NULL;
    /* Each glyphless character becomes one space (never longer than what it replaces); then
     * the white space at both ends goes. */
    size_t n = strlen(utf8), k = 0, first = SIZE_MAX, end = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t len = cfs_utf8_decode((const unsigned char *)utf8 + i, n - i, &cp);
        if (len == 0)           /* not after cfs_text_to_utf8; a byte, then */
            len = 1, cp = 0;
        bool blank = glyphless(cp) || white_space(cp);
        if (glyphless(cp)) {
            utf8[k++] = ' ';
        } else {
            memmove(utf8 + k, utf8 + i, len);
            k += len;
        }
        if (!blank && first == SIZE_MAX)
            first = k - len;
        if (!blank)
            end = k;
        i += len;
    }
    if (first == SIZE_MAX) {
        free(utf8);
        return NULL;
    }
    memmove(utf8, utf8 + first, end - first);
    utf8[end - first] = '\0';
    return utf8;
}

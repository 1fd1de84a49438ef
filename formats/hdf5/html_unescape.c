/*
 * XML / HTML character references, unescaped exactly as Python's html.unescape (which loompy
 * applies to every string it reads) for numeric references and for the entity names that may
 * stand without a ';' (the XML ones and HTML's Latin-1 set), plus &apos;.
 */

#include "html_unescape.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

/* U+00A0 .. U+00FF, in code point order. */
static const char *const latin1_names[96] = {
    "nbsp", "iexcl", "cent", "pound", "curren", "yen", "brvbar", "sect", "uml", "copy", "ordf",
    "laquo", "not", "shy", "reg", "macr", "deg", "plusmn", "sup2", "sup3", "acute", "micro",
    "para", "middot", "cedil", "sup1", "ordm", "raquo", "frac14", "frac12", "frac34", "iquest",
    "Agrave", "Aacute", "Acirc", "Atilde", "Auml", "Aring", "AElig", "Ccedil", "Egrave", "Eacute",
    "Ecirc", "Euml", "Igrave", "Iacute", "Icirc", "Iuml", "ETH", "Ntilde", "Ograve", "Oacute",
    "Ocirc", "Otilde", "Ouml", "times", "Oslash", "Ugrave", "Uacute", "Ucirc", "Uuml", "Yacute",
    "THORN", "szlig", "agrave", "aacute", "acirc", "atilde", "auml", "aring", "aelig", "ccedil",
    "egrave", "eacute", "ecirc", "euml", "igrave", "iacute", "icirc", "iuml", "eth", "ntilde",
    "ograve", "oacute", "ocirc", "otilde", "ouml", "divide", "oslash", "ugrave", "uacute",
    "ucirc", "uuml", "yacute", "thorn", "yuml",
};

static const struct {
    const char *name;
    uint32_t cp;
} legacy_extra[] = {
    {"amp", '&'}, {"AMP", '&'}, {"lt", '<'}, {"LT", '<'}, {"gt", '>'}, {"GT", '>'},
    {"quot", '"'}, {"QUOT", '"'}, {"COPY", 0xA9}, {"REG", 0xAE},
};

#define LEGACY_MAX_LEN 6

/* A name that html5 lists with and without ';'; returns its code point or 0. */
static uint32_t legacy_entity(const char *s, size_t len)
{
    if (len < 2 || len > LEGACY_MAX_LEN)
        return 0;
    for (size_t i = 0; i < 96; i++)
        if (strlen(latin1_names[i]) == len && memcmp(latin1_names[i], s, len) == 0)
            return 0xA0 + (uint32_t)i;
    for (size_t i = 0; i < sizeof legacy_extra / sizeof legacy_extra[0]; i++)
        if (strlen(legacy_extra[i].name) == len && memcmp(legacy_extra[i].name, s, len) == 0)
            return legacy_extra[i].cp;
    return 0;
}

/* Windows-1252 meanings of &#128; .. &#159; (html5's "invalid charrefs"). */
static const uint16_t cp1252[32] = {
    0x20AC, 0x81, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
    0x2039, 0x0152, 0x8D, 0x017D, 0x8F, 0x90, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013,
    0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D, 0x017E, 0x0178,
};

/* What &#num; stands for: 1 with *cp, or 0 for nothing (a code point html5 drops). */
static int charref(uint64_t num, uint32_t *cp)
{
    if (num == 0) {
        *cp = 0xFFFD;
        return 1;
    }
    if (num == 0x0D) {
        *cp = 0x0D;
        return 1;
    }
    if (num >= 0x80 && num <= 0x9F) {
        *cp = cp1252[num - 0x80];
        return 1;
    }
    if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) {
        *cp = 0xFFFD;
        return 1;
    }
    if ((num >= 0x1 && num <= 0x8) || num == 0xB || (num >= 0xE && num <= 0x1F) || num == 0x7F ||
        (num >= 0xFDD0 && num <= 0xFDEF) || (num & 0xFFFE) == 0xFFFE)
        return 0;
    *cp = (uint32_t)num;
    return 1;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* &#123; / &#x7B; at s (s[0] == '&', s[1] == '#'): bytes consumed, 0 if it is not one. */
static size_t numeric_ref(const char *s, char *out, size_t *olen)
{
    size_t j = 2;
    int base = 10;
    if (s[2] >= '0' && s[2] <= '9') {
        base = 10;
    } else if ((s[2] == 'x' || s[2] == 'X') && hexval((unsigned char)s[3]) >= 0) {
        base = 16;
        j = 3;
    } else {
        return 0;
    }
    uint64_t num = 0;
    for (int d; (d = base == 10 ? (s[j] >= '0' && s[j] <= '9' ? s[j] - '0' : -1)
                                : hexval((unsigned char)s[j])) >= 0;
         j++)
        if (num <= 0x10FFFF)
            num = num * (uint64_t)base + (uint64_t)d; /* past U+10FFFF it is U+FFFD anyway */
    if (s[j] == ';')
        j++;
    uint32_t cp;
    *olen = charref(num, &cp) ? cfs_utf8_put(out, cp) : 0;
    return j;
}

/* A named reference at s (s[0] == '&'): bytes consumed, 0 if none applies. Python matches
 * [^\t\n\f <&#;]{1,32};? and then the whole name, else its longest legacy prefix. */
static size_t named_ref(const char *s, char *out, size_t *olen)
{
    size_t j = 1, chars = 0;
    while (s[j] && !strchr("\t\n\f <&#;", s[j])) {
        if (((unsigned char)s[j] & 0xC0) != 0x80) {
            if (chars == 32)
                break;
            chars++;
        }
        j++;
    }
    size_t run = j - 1;
    if (run == 0)
        return 0;
    bool semi = s[j] == ';';
    uint32_t cp = legacy_entity(s + 1, run);
    if (!cp && semi && run == 4 && memcmp(s + 1, "apos", 4) == 0)
        cp = '\'';
    if (cp) {
        *olen = cfs_utf8_put(out, cp);
        return j + (semi ? 1 : 0);
    }
    for (size_t x = run - 1 < LEGACY_MAX_LEN ? run - 1 : LEGACY_MAX_LEN; x >= 2; x--) {
        if ((cp = legacy_entity(s + 1, x))) {
            *olen = cfs_utf8_put(out, cp);
            return 1 + x;
        }
    }
    return 0;
}

char *cfs_html_unescape(const char *s)
{
    size_t len = strlen(s);
    char *out = malloc(2 * len + 8);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t used = 0, olen = 0;
        if (s[i] == '&')
            used = s[i + 1] == '#' ? numeric_ref(s + i, out + o, &olen)
                                   : named_ref(s + i, out + o, &olen);
        if (used) {
            o += olen;
            i += used;
        } else {
            out[o++] = s[i++];
        }
    }
    out[o] = '\0';
    return out;
}

int cfs_html_unescape_all(char **s, size_t n, cfs_err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (!strchr(s[i], '&'))
            continue;
        char *u = cfs_html_unescape(s[i]);
        if (!u) {
            cfs_strings_free(s, n);
            return cfs_err_oom(err);
        }
        free(s[i]);
        s[i] = u;
    }
    return 0;
}

#include "number.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool digit(char c)
{
    return c >= '0' && c <= '9';
}

const char *cfs_scan_u64(const char *s, bool canonical, uint64_t *out)
{
    if (!digit(*s) || (canonical && s[0] == '0' && digit(s[1])))
        return NULL;
    uint64_t v = 0;
    for (; digit(*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return NULL;
        v = v * 10 + d;
    }
    *out = v;
    return s;
}

bool cfs_parse_u64(const char *s, uint64_t *out)
{
    uint64_t v;
    const char *end = cfs_scan_u64(s, false, &v);
    if (!end || *end)
        return false;
    *out = v;
    return true;
}

bool cfs_parse_i64(const char *s, int64_t *out)
{
    bool neg = *s == '-';
    if (*s == '-' || *s == '+')
        s++;
    uint64_t u;
    if (!cfs_parse_u64(s, &u))
        return false;
    if (neg ? u > (uint64_t)INT64_MAX + 1 : u > (uint64_t)INT64_MAX)
        return false;
    *out = neg ? (int64_t)(0 - u) : (int64_t)u;
    return true;
}

bool cfs_parse_double(const char *s, bool finite_only, double *out)
{
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    /* strtod would skip leading white space and read hexadecimal floats. */
    if (!*p || (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) || !(isdigit((unsigned char)*p) ||
        *p == '.' || *p == 'i' || *p == 'I' || *p == 'n' || *p == 'N'))
        return false;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || (finite_only && !isfinite(v)))
        return false;
    *out = v;
    return true;
}

bool cfs_parse_size(const char *s, uint64_t *out)
{
    char digits[32];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof digits)
        return false;
    memcpy(digits, s, n + 1);
    uint64_t unit = 1, v;
    switch (digits[n - 1]) {
    case 'K': case 'k': unit = UINT64_C(1) << 10; break;
    case 'M': case 'm': unit = UINT64_C(1) << 20; break;
    case 'G': case 'g': unit = UINT64_C(1) << 30; break;
    default: break;
    }
    if (unit > 1)
        digits[n - 1] = '\0';
    if (!cfs_parse_u64(digits, &v) || v > UINT64_MAX / unit)
        return false;
    *out = v * unit;
    return true;
}

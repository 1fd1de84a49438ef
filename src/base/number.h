/*
 * Strict number parsing for every text the project reads (MatrixMarket and CSV fields, option
 * values, chunk keys, cache file names): the whole string is the number, with no spaces, no
 * hexadecimal and no silent wrap-around, which is where strtoull and friends differ from what
 * a reader of those files means (strtoull takes "-1" as 2^64-1 and " 7" as 7).
 */
#ifndef CFS_NUMBER_H
#define CFS_NUMBER_H

#include <stdbool.h>
#include <stdint.h>

/* Decimal digits only (leading zeros allowed), at most UINT64_MAX. */
bool cfs_parse_u64(const char *s, uint64_t *out);
/* An optional sign, then decimal digits, within int64_t. */
bool cfs_parse_i64(const char *s, int64_t *out);
/* A decimal floating-point number in strtod's grammar without hexadecimal floats; "inf" and
 * "nan" (any case, signed) are numbers too unless finite_only. */
bool cfs_parse_double(const char *s, bool finite_only, double *out);
/* A size: decimal digits with an optional K, M or G suffix (either case, powers of 1024). */
bool cfs_parse_size(const char *s, uint64_t *out);
/*
 * The decimal digits at the start of s as a number, or NULL if there are none or it exceeds
 * UINT64_MAX; returns where they end. canonical refuses leading zeros ("01"), for names that
 * must have one spelling (Zarr chunk keys).
 */
const char *cfs_scan_u64(const char *s, bool canonical, uint64_t *out);

#endif

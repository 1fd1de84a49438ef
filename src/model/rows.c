/* Reading a scattered set of whole rows (model.h, cfs_array_read_rows): one chunk's cells in
 * priority order are rows spread over the whole source (docs/design.md §7). */
#include "model.h"

#include <stdlib.h>
#include <string.h>

/* A block read by cfs_array_read_rows_by_blocks spans at most this many bytes of rows, and
 * skips at most GAP_BYTES between two rows asked for: a read costs about as much as reading
 * that many bytes more, and rows further apart are read separately. */
#define BLOCK_BYTES ((uint64_t)4 << 20)
#define GAP_BYTES ((uint64_t)64 << 10)
/* What a string is counted as in that span (its pointer and its bytes). */
#define STRING_BYTES 64u

uint64_t cfs_array_row_elems(const cfs_array *arr)
{
    uint64_t n = 1;
    for (int d = 1; d < arr->ndim; d++)
        n *= arr->shape[d];
    return n;
}

static int check_rows(const cfs_array *arr, const uint64_t *rows, uint64_t n, cfs_err *err)
{
    if (arr->ndim < 1)
        return cfs_err_set(err, "rows of a scalar");
    for (uint64_t i = 0; i < n; i++)
        if (rows[i] >= arr->shape[0] || (i && rows[i] <= rows[i - 1]))
            return cfs_err_set(err, "rows asked for out of order or outside the array");
    return 0;
}

int cfs_array_read_rows(const cfs_array *arr, const uint64_t *rows, uint64_t n, void *out,
                        cfs_strpool *pool, cfs_err *err)
{
    if (check_rows(arr, rows, n, err) < 0)
        return -1;
    if (n == 0)
        return 0;
    if (arr->ops->read_rows)
        return arr->ops->read_rows(arr, rows, n, out, pool, err);
    return cfs_array_read_rows_by_blocks(arr, rows, n, out, pool, err);
}

/* Rows [first, first + nrows) whole, into out; strings put in pool. */
static int read_span(const cfs_array *arr, uint64_t first, uint64_t nrows, void *out,
                     cfs_strpool *pool, cfs_err *err)
{
    uint64_t start[CFS_MAX_DIMS] = {first}, count[CFS_MAX_DIMS] = {nrows};
    for (int d = 1; d < arr->ndim; d++)
        count[d] = arr->shape[d];
    if (arr->dtype == CFS_STRING)
        return cfs_array_read_strings(arr, start, count, out, pool, err);
    return cfs_array_read(arr, start, count, out, err);
}

/* Keeps rows[0..k) of a span read from its first row into dst, packed. */
static int pick_rows(const cfs_array *arr, const unsigned char *span, uint64_t first,
                     const uint64_t *rows, uint64_t k, unsigned char *dst, cfs_strpool *pool,
                     cfs_err *err)
{
    uint64_t row_elems = cfs_array_row_elems(arr);
    size_t row_bytes = (size_t)row_elems * cfs_array_elem_size(arr);
    for (uint64_t i = 0; i < k; i++) {
        const unsigned char *src = span + (rows[i] - first) * row_bytes;
        if (arr->dtype != CFS_STRING) {
            memcpy(dst + i * row_bytes, src, row_bytes);
            continue;
        }
        const char *const *from = (const char *const *)src;
        const char **to = (const char **)(dst + i * row_bytes);
        for (uint64_t e = 0; e < row_elems; e++) {
            const char *s = from[e] ? from[e] : "";
            if (!(to[e] = cfs_strpool_dup(pool, s, strlen(s))))
                return cfs_err_oom(err);
        }
    }
    return 0;
}

int cfs_array_read_rows_by_blocks(const cfs_array *arr, const uint64_t *rows, uint64_t n,
                                  void *out, cfs_strpool *pool, cfs_err *err)
{
    uint64_t row_elems = cfs_array_row_elems(arr);
    size_t esize = cfs_array_elem_size(arr);
    size_t row_bytes = (size_t)row_elems * esize;
    uint64_t weight = row_elems * (arr->dtype == CFS_STRING ? STRING_BYTES : esize);
    uint64_t reach = BLOCK_BYTES / (weight ? weight : 1), gap = GAP_BYTES / (weight ? weight : 1);
    if (reach == 0)
        reach = 1;
    unsigned char *dst = out;
    for (uint64_t i = 0; i < n;) {
        uint64_t first = rows[i], j = i + 1;
        while (j < n && rows[j] - first < reach && rows[j] - rows[j - 1] - 1 <= gap)
            j++;
        uint64_t span = rows[j - 1] - first + 1;
        if (span == j - i) {
            /* Consecutive rows: straight into place. */
            if (read_span(arr, first, span, dst + i * row_bytes, pool, err) < 0)
                return -1;
            i = j;
            continue;
        }
        unsigned char *tmp = malloc((size_t)span * row_bytes);
        cfs_strpool *scratch = arr->dtype == CFS_STRING ? cfs_strpool_new() : NULL;
        int rc = tmp && (scratch || arr->dtype != CFS_STRING) ? 0 : cfs_err_oom(err);
        if (rc == 0)
            rc = read_span(arr, first, span, tmp, scratch, err);
        if (rc == 0)
            rc = pick_rows(arr, tmp, first, rows + i, j - i, dst + i * row_bytes, pool, err);
        cfs_strpool_free(scratch);
        free(tmp);
        if (rc < 0)
            return -1;
        i = j;
    }
    return 0;
}

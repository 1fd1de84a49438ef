#include "chunking.h"

#include <stdlib.h>
#include <string.h>

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

/* Rows per chunk for cells cut on the priority levels: the largest divisor of level_rows whose
 * rows fit CFS_CHUNK_WHOLE_BYTES (all rows when they are fewer). 0 when the levels cannot be
 * kept: a row alone too wide, or more chunks than the bound allows. */
static uint64_t level_chunk_rows(uint64_t rows, uint64_t row_bytes, uint64_t level_rows)
{
    if (row_bytes > CFS_CHUNK_WHOLE_BYTES)
        return 0;
    uint64_t per = level_rows;
    for (uint64_t k = 2; per > 1 && per * row_bytes > CFS_CHUNK_WHOLE_BYTES; k++)
        if (level_rows % k == 0)
            per = level_rows / k;
    if (rows <= per)
        return rows;
    return ceil_div(rows, per) <= CFS_CHUNK_MAX_COUNT ? per : 0;
}

void cfs_chunk_shape(int ndim, const uint64_t *shape, size_t elem_bytes, uint64_t level_rows,
                     uint64_t *chunks)
{
    if (ndim == 0)
        return;
    uint64_t row_elems = 1;
    for (int d = 1; d < ndim; d++) {
        chunks[d] = shape[d] ? shape[d] : 1;
        row_elems *= chunks[d];
    }
    uint64_t row_bytes = row_elems * (elem_bytes ? elem_bytes : 1);
    uint64_t rows = shape[0] ? shape[0] : 1;
    uint64_t level = level_rows ? level_chunk_rows(rows, row_bytes, level_rows) : 0;
    if (level) {
        chunks[0] = level;
        return;
    }
    if (rows * row_bytes <= CFS_CHUNK_WHOLE_BYTES) {
        chunks[0] = rows;
        return;
    }
    if (row_bytes > CFS_CHUNK_WHOLE_BYTES && ndim >= 2) {
        /* One row alone is too big: one row per chunk, and split the second axis. */
        chunks[0] = 1;
        uint64_t slice_bytes = row_bytes / chunks[1];
        uint64_t cols = CFS_CHUNK_TARGET_BYTES / (slice_bytes ? slice_bytes : 1);
        chunks[1] = cols ? cols : 1;
        return;
    }
    uint64_t per = CFS_CHUNK_TARGET_BYTES / row_bytes;
    if (per == 0)
        per = 1;
    if (ceil_div(rows, per) > CFS_CHUNK_MAX_COUNT)
        per = ceil_div(rows, CFS_CHUNK_MAX_COUNT);
    chunks[0] = per;
}

uint64_t cfs_chunk_grid(int ndim, const uint64_t *shape, const uint64_t *chunks, uint64_t *grid)
{
    uint64_t total = 1;
    for (int d = 0; d < ndim; d++) {
        grid[d] = ceil_div(shape[d], chunks[d]);
        total *= grid[d];
    }
    return total;
}

void cfs_chunk_coords(int ndim, const uint64_t *grid, uint64_t idx, uint64_t *coords)
{
    for (int d = ndim - 1; d >= 0; d--) {
        coords[d] = idx % grid[d];
        idx /= grid[d];
    }
}

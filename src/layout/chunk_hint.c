#include "chunk_hint.h"

#include "priority.h"

/* Genes a dense block takes to reach the minimum chunk size, at most. */
#define DENSE_GENES_FOR_SIZE 64u

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

/* want elements a chunk, within the bounds for total elements of esize bytes; 0 (no hint: the
 * renderer's byte rule) when that is the whole array. */
static uint64_t bounded_chunk(uint64_t total, uint64_t want, size_t esize)
{
    uint64_t c = want;
    uint64_t least = ceil_div(CFS_HINT_MIN_CHUNK_BYTES, esize ? esize : 1);
    uint64_t most = CFS_HINT_MAX_CHUNK_BYTES / (esize ? esize : 1);
    if (c < least)
        c = least;
    if (c > most)
        c = most;
    if (c < ceil_div(total, CFS_HINT_MAX_CHUNKS))
        c = ceil_div(total, CFS_HINT_MAX_CHUNKS);
    return c >= total ? 0 : c;
}

static uint64_t pow2_floor(uint64_t x)
{
    uint64_t p = 1;
    while (p <= x / 2)
        p *= 2;
    return p;
}

void cfs_hint_cells(cfs_array *arr)
{
    if (arr && arr->ndim >= 1)
        arr->level_rows = CFS_PRIORITY_CHUNK_LEVEL;
}

void cfs_hint_ranges(cfs_array *arr, uint64_t range, size_t esize)
{
    if (arr && arr->ndim == 1)
        arr->chunk_hint[0] = bounded_chunk(arr->shape[0], pow2_floor(range / 2 ? range / 2 : 1),
                                           esize);
}

void cfs_hint_sparse_cells(cfs_elem *el, uint64_t n_cells, bool cells_major)
{
    if (!cells_major || n_cells == 0)
        return;
    cfs_hint_cells(el->indptr);
    uint64_t nnz = el->values->shape[0];
    /* A first chunk-aligned level's share of the entries, on average. */
    uint64_t level = CFS_PRIORITY_CHUNK_LEVEL < n_cells ? CFS_PRIORITY_CHUNK_LEVEL : n_cells;
    uint64_t share = nnz / n_cells * level + nnz % n_cells * level / n_cells;
    /* Index arrays may widen to 8 bytes later (sparse_index.c): bound for the widest. */
    uint64_t c = bounded_chunk(nnz, share, 8);
    el->values->chunk_hint[0] = c;
    el->aux->chunk_hint[0] = c;
}

void cfs_hint_dense_block(uint64_t n_obs, uint64_t n_vars, size_t esize, uint64_t *rows,
                          uint64_t *genes)
{
    uint64_t r = n_obs < CFS_PRIORITY_CHUNK_LEVEL ? n_obs : CFS_PRIORITY_CHUNK_LEVEL;
    if (r == 0)
        r = 1;
    uint64_t g = ceil_div(CFS_HINT_MIN_CHUNK_BYTES, r * (esize ? esize : 1));
    if (g > DENSE_GENES_FOR_SIZE)
        g = DENSE_GENES_FOR_SIZE;
    uint64_t by_count = ceil_div(n_vars * ceil_div(n_obs ? n_obs : 1, r), CFS_HINT_MAX_CHUNKS);
    if (g < by_count)
        g = by_count;
    if (g > n_vars)
        g = n_vars ? n_vars : 1;
    *rows = r;
    *genes = g;
}

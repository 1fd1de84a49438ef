#include "flavour_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunking.h"
#include "number.h"

const cfs_flavour *cfs_flavour_of(const cfs_store_opts *opts)
{
    (void)opts;
    return &cfs_flavour_zarr_v2;
}

const char *cfs_flavour_name(const cfs_flavour *fl)
{
    return fl->name;
}

/* ---- the walk ------------------------------------------------------------------------- */

int cfs_flavour_walk(const cfs_flavour *fl, const cfs_store *st, const cfs_walker *w, void *ctx,
                     cfs_err *err)
{
    for (size_t i = 0; i < st->nnodes; i++)
        if (w->folder(ctx, i, st->nodes[i].path, err) < 0 || fl->node_docs(st, i, w, ctx, err) < 0)
            return -1;
    size_t *order = malloc((st->nnodes ? st->nnodes : 1) * sizeof *order);
    if (!order)
        return cfs_err_oom(err);
    cfs_store_view_order(st, order);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < st->nnodes; i++)
        if (st->nodes[order[i]].is_array)
            rc = w->data(ctx, order[i], err);
    free(order);
    return rc;
}

/* ---- data keys ------------------------------------------------------------------------ */

static void data_grid(const cfs_flavour *fl, const cfs_store_node *n, uint64_t *grid)
{
    if (fl->data_grid)
        fl->data_grid(n, grid);
    else
        memcpy(grid, n->grid, sizeof n->grid);
}

uint64_t cfs_flavour_nkeys(const cfs_flavour *fl, const cfs_store_node *n)
{
    if (!n->is_array)
        return 0;
    uint64_t grid[CFS_MAX_DIMS], total = 1;
    data_grid(fl, n, grid);
    for (int d = 0; d < n->ndim; d++)
        total *= grid[d];
    return total;
}

/* A 0-d array's one key. */
static const char *scalar_key(const cfs_flavour *fl)
{
    return fl->key_prefix ? fl->key_prefix : "0";
}

void cfs_flavour_key(const cfs_flavour *fl, const cfs_store_node *n, uint64_t k, char *buf,
                     size_t len)
{
    if (n->ndim == 0) {
        snprintf(buf, len, "%s", scalar_key(fl));
        return;
    }
    uint64_t grid[CFS_MAX_DIMS], coords[CFS_MAX_DIMS];
    data_grid(fl, n, grid);
    cfs_chunk_coords(n->ndim, grid, k, coords);
    size_t pos = (size_t)snprintf(buf, len, "%s", fl->key_prefix ? fl->key_prefix : "");
    for (int d = 0; d < n->ndim && pos < len; d++) {
        char sep[2] = {pos ? fl->key_sep : '\0', '\0'};
        pos += (size_t)snprintf(buf + pos, len - pos, "%s%llu", sep, (unsigned long long)coords[d]);
    }
}

/* Keys are one name ("0.3"), or a folder a part ("c/0/3"). */
static bool nested(const cfs_flavour *fl)
{
    return fl->key_sep == '/';
}

/* Parts of a key: the prefix, then one a dimension (a 0-d array's key is one part). */
static uint32_t nparts(const cfs_flavour *fl, const cfs_store_node *n)
{
    uint32_t p = (fl->key_prefix ? 1u : 0u) + (uint32_t)n->ndim;
    return p ? p : 1;
}

/* The key index of a whole one-name key, or -1: the prefix, then canonical decimal coordinates
 * (a second name for a chunk, "01", would be a second file of the same bytes). */
static int parse_flat(const cfs_flavour *fl, const cfs_store_node *n, const uint64_t *grid,
                      const char *name, uint64_t *k)
{
    if (n->ndim == 0)
        return strcmp(name, scalar_key(fl)) == 0 ? (*k = 0, 0) : -1;
    const char *p = name;
    if (fl->key_prefix) {
        size_t plen = strlen(fl->key_prefix);
        if (strncmp(p, fl->key_prefix, plen) != 0 || p[plen] != fl->key_sep)
            return -1;
        p += plen + 1;
    }
    uint64_t linear = 0;
    for (int d = 0; d < n->ndim; d++) {
        uint64_t c;
        p = cfs_scan_u64(p, true, &c);
        if (!p || c >= grid[d])
            return -1;
        linear = linear * grid[d] + c;
        if (d + 1 < n->ndim && *p++ != fl->key_sep)
            return -1;
    }
    if (*p)
        return -1;
    *k = linear;
    return 0;
}

/* What entry i of a nested folder at `dir` is: its name, and the folder or key it leads to. */
static cfs_key_kind nested_entry(const cfs_flavour *fl, const cfs_store_node *n,
                                 const uint64_t *grid, cfs_keydir dir, uint64_t i, char *buf,
                                 size_t len, cfs_keydir *child, uint64_t *k)
{
    bool last = dir.depth + 1 == nparts(fl, n);
    uint64_t prefix = dir.prefix;
    if (fl->key_prefix && dir.depth == 0) {
        snprintf(buf, len, "%s", fl->key_prefix);
    } else if (n->ndim == 0) {
        snprintf(buf, len, "0");
    } else {
        uint32_t d = dir.depth - (fl->key_prefix ? 1u : 0u);
        snprintf(buf, len, "%llu", (unsigned long long)i);
        prefix = prefix * grid[d] + i;
    }
    if (last) {
        *k = n->ndim == 0 ? 0 : prefix;
        return CFS_KEY_FILE;
    }
    *child = (cfs_keydir){dir.depth + 1, prefix};
    return CFS_KEY_FOLDER;
}

uint64_t cfs_flavour_nentries(const cfs_flavour *fl, const cfs_store_node *n, cfs_keydir dir)
{
    if (!n->is_array)
        return 0;
    if (!nested(fl))
        return dir.depth == 0 ? cfs_flavour_nkeys(fl, n) : 0;
    if (dir.depth >= nparts(fl, n))
        return 0;
    if ((fl->key_prefix && dir.depth == 0) || n->ndim == 0)
        return 1;
    uint64_t grid[CFS_MAX_DIMS];
    data_grid(fl, n, grid);
    return grid[dir.depth - (fl->key_prefix ? 1u : 0u)];
}

cfs_key_kind cfs_flavour_entry(const cfs_flavour *fl, const cfs_store_node *n, cfs_keydir dir,
                               uint64_t i, char *buf, size_t len, cfs_keydir *child,
                               uint64_t *k)
{
    if (i >= cfs_flavour_nentries(fl, n, dir))
        return CFS_KEY_NONE;
    if (!nested(fl)) {
        cfs_flavour_key(fl, n, i, buf, len);
        *k = i;
        return CFS_KEY_FILE;
    }
    uint64_t grid[CFS_MAX_DIMS];
    data_grid(fl, n, grid);
    return nested_entry(fl, n, grid, dir, i, buf, len, child, k);
}

cfs_key_kind cfs_flavour_lookup(const cfs_flavour *fl, const cfs_store_node *n, cfs_keydir dir,
                                const char *name, cfs_keydir *child, uint64_t *k)
{
    uint64_t count = cfs_flavour_nentries(fl, n, dir);
    if (count == 0)
        return CFS_KEY_NONE;
    uint64_t grid[CFS_MAX_DIMS];
    data_grid(fl, n, grid);
    if (!nested(fl))
        return parse_flat(fl, n, grid, name, k) == 0 ? CFS_KEY_FILE : CFS_KEY_NONE;
    uint64_t i = 0;
    if ((fl->key_prefix && dir.depth == 0) || n->ndim == 0) {
        if (strcmp(name, fl->key_prefix && dir.depth == 0 ? fl->key_prefix : "0") != 0)
            return CFS_KEY_NONE;
    } else {
        const char *end = cfs_scan_u64(name, true, &i);
        if (!end || *end || i >= count)
            return CFS_KEY_NONE;
    }
    char buf[32];
    return nested_entry(fl, n, grid, dir, i, buf, sizeof buf, child, k);
}

int cfs_flavour_key_bytes(const cfs_flavour *fl, const cfs_store *st, const cfs_store_node *n,
                          uint64_t k, cfs_buf *out, cfs_err *err)
{
    if (k >= cfs_flavour_nkeys(fl, n))
        return cfs_err_set(err, "%s: no key %llu", n->path, (unsigned long long)k);
    if (fl->data_bytes)
        return fl->data_bytes(st, n, k, out, err);
    return cfs_store_chunk(st, n, k, out, err);
}

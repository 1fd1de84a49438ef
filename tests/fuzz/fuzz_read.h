/* The fuzz targets' other shared piece: reading every array of an opened dataset (its first
 * element, or as a target chooses), which makes the readers decode a chunk of each (or,
 * isolated, ask a worker for it). */
#ifndef CFS_FUZZ_READ_H
#define CFS_FUZZ_READ_H

#include <stdlib.h>

#include "model.h"

static inline void fuzz_read_array(const cfs_array *a)
{
    if (!a || a->ndim > CFS_MAX_DIMS)
        return;
    uint64_t start[CFS_MAX_DIMS] = {0}, count[CFS_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] == 0)
            return;
        count[d] = 1;
    }
    /* one element: a record of a compound dtype may be of any size */
    unsigned char *buf = calloc(1, cfs_array_elem_size(a) + 1);
    cfs_err err = {0};
    if (buf && cfs_array_read(a, start, count, buf, &err) == 0 && a->dtype == CFS_STRING)
        cfs_strings_free((char **)buf, 1);
    free(buf);
}

/* Calls read on every array of el and of the elements below it. */
static inline void fuzz_read_each(const cfs_elem *el, void (*read)(const cfs_array *))
{
    if (!el)
        return;
    read(el->values);
    read(el->aux);
    read(el->indptr);
    fuzz_read_each(el->index, read);
    fuzz_read_each(el->categories, read);
    for (size_t i = 0; i < el->nchildren; i++)
        fuzz_read_each(el->children[i], read);
}

static inline void fuzz_read_first(const cfs_elem *el)
{
    fuzz_read_each(el, fuzz_read_array);
}

#endif

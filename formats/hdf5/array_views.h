/*
 * Views over other arrays: transposed, squeezed (n, 1) -> n, strings unescaped, integers as
 * decimal strings, categorical codes in pandas' integer type. They read through the inner
 * array, which takes the HDF5 lock for its read; the rest happens outside the lock.
 */
#ifndef CFS_ARRAY_VIEWS_H
#define CFS_ARRAY_VIEWS_H

#include "model.h"

typedef enum cfs_view_kind {
    CFS_VIEW_TRANSPOSE, /* a 2-d array with its axes swapped */
    CFS_VIEW_SQUEEZE,   /* an (n, 1) array as n */
    CFS_VIEW_UNESCAPE,  /* strings with their character references unescaped (html_unescape.h) */
    CFS_VIEW_FORMAT,    /* integers as decimal strings */
    CFS_VIEW_CODES,     /* integers as another integer type (made by cfs_view_codes only) */
    CFS_VIEW_EQUALS,    /* bools: whether each integer is one value (made by cfs_view_equals) */
} cfs_view_kind;

/* A view of inner (whose reference it takes over, also on failure). NULL on allocation
 * failure. */
cfs_array *cfs_view_new(cfs_view_kind kind, cfs_array *inner);

/* The integer type pandas keeps categorical codes in for that many categories (int8 below
 * 127, then int16, int32, int64: pandas' coerce_indexer_dtype). */
cfs_dtype cfs_codes_dtype(uint64_t ncategories);
/* Integer codes as that type: inner itself if it is already, else a view (which takes over
 * inner's reference, also on failure). NULL on allocation failure. */
cfs_array *cfs_view_codes(cfs_array *inner, uint64_t ncategories);

/* Bools: whether each integer of inner equals value (R's logical enum: TRUE, or NA). Takes a
 * reference to inner of its own. NULL on allocation failure. */
cfs_array *cfs_view_equals(cfs_array *inner, int64_t value);

#endif

/*
 * Views over other arrays: transposed, squeezed (n, 1) -> n, strings unescaped, integers as
 * decimal strings. They read through the inner array, which takes the HDF5 lock for its read;
 * the rest happens outside the lock.
 */
#ifndef CFS_ARRAY_VIEWS_H
#define CFS_ARRAY_VIEWS_H

#include "model.h"

typedef enum cfs_view_kind {
    CFS_VIEW_TRANSPOSE, /* a 2-d array with its axes swapped */
    CFS_VIEW_SQUEEZE,   /* an (n, 1) array as n */
    CFS_VIEW_UNESCAPE,  /* strings with their character references unescaped (html_unescape.h) */
    CFS_VIEW_FORMAT,    /* integers as decimal strings */
} cfs_view_kind;

/* A view of inner (whose reference it takes over, also on failure). NULL on allocation
 * failure. */
cfs_array *cfs_view_new(cfs_view_kind kind, cfs_array *inner);

#endif

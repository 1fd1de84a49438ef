/* Where `export` puts the keys of its stores: a folder (export.c) or object storage
 * (export_s3.c). The export logic is one; only where the bytes go differs. */
#ifndef CFS_SINK_H
#define CFS_SINK_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

typedef struct cfs_sink cfs_sink;
struct cfs_sink {
    /* Makes room for keys below key/ (a folder's mkdir; object storage has no folders). */
    int (*dir)(cfs_sink *s, const char *key, cfs_err *err);
    /* Writes data as key (json: a JSON document). Called from several threads at once. */
    int (*put)(cfs_sink *s, const char *key, const void *data, size_t len, bool json,
               cfs_err *err);
    /* Removes what was written below key/ (a store that failed), where that can be done. */
    void (*discard)(cfs_sink *s, const char *key);
    /* Waits until every put so far is stored; -1 with the first failure. */
    int (*drain)(cfs_sink *s, cfs_err *err);
};

#endif

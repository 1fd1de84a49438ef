/*
 * The dataset model (model.h) as the reader worker sends it to the daemon: every element, kind,
 * name and attribute, and each distinct array once, with an id (its index in the order first
 * met) by which the daemon asks for its values. Both sides name each array by the same element
 * path ("obs/cell_type/codes"), for what a fault report says.
 */
#ifndef CFS_WIRE_MODEL_H
#define CFS_WIRE_MODEL_H

#include <stdint.h>

#include "buf.h"
#include "model.h"

/* The arrays of a model, by id, with their element paths. */
typedef struct cfs_wire_arrays {
    cfs_array **arr;
    char **path;
    size_t n, cap;
} cfs_wire_arrays;

void cfs_wire_arrays_free(cfs_wire_arrays *t);

/* Appends ds's model to out; t receives its arrays (borrowed from ds) by id. */
int cfs_wire_model_encode(const cfs_dataset *ds, cfs_buf *out, cfs_wire_arrays *t, cfs_err *err);

/* What the daemon puts behind each array: ctx for the array of that id and path (NULL when out
 * of memory), read through ops; free_ctx of ops frees it with the array. */
typedef struct cfs_wire_proxy {
    const cfs_array_ops *ops;
    void *(*make_ctx)(void *maker, uint32_t id, const char *path);
    void *maker;
    /* Optional: the values of a small numeric obsm array the embedding check will read, sent
     * with the model (all of them, in C order) for ctx to serve its first whole read from; -1
     * when out of memory. */
    int (*keep_values)(void *ctx, const void *values, size_t len);
} cfs_wire_proxy;

/* At most this many bytes of obsm values are sent with a model. */
#define CFS_WIRE_INLINE_BYTES ((uint64_t)64 << 10)

/* A new dataset of source from len bytes of a model, its arrays made through proxy; *narrays
 * receives how many it has. NULL with err (status CFS_EDAMAGED) if the bytes are not a valid
 * model: every length, kind, dtype, shape and the members each kind needs are checked. */
cfs_dataset *cfs_wire_model_decode(const void *bytes, size_t len, const char *source,
                                   const cfs_wire_proxy *proxy, uint32_t *narrays, cfs_err *err);

#endif

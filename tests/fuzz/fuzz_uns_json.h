/* uns values from JSON, as a reader gives them: a mapping per object, a 0-d value per string,
 * integer, real or bool, a 1-d array per list of one kind of value, a mapping "0", "1", ... per
 * other list, and {"@dtype": "uint64", "@data": ...} for another numeric dtype. Shared by
 * fuzz_cellucid_meta and the unit tests replaying what it found. */
#ifndef CFS_FUZZ_UNS_JSON_H
#define CFS_FUZZ_UNS_JSON_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* Stores v as element i of a buffer of dtype t (little-endian, as this machine is). */
static inline void uns_put(cfs_dtype t, void *buf, size_t i, const json_t *v)
{
    double d = json_number_value(v);
    int64_t n = json_is_integer(v) ? json_integer_value(v)
                : (int64_t)(d > -9e18 && d < 9e18 ? d : 0);
    switch (t) {
    case CFS_BOOL: ((uint8_t *)buf)[i] = json_is_true(v) || n != 0; break;
    case CFS_INT8: ((int8_t *)buf)[i] = (int8_t)n; break;
    case CFS_INT16: ((int16_t *)buf)[i] = (int16_t)n; break;
    case CFS_INT32: ((int32_t *)buf)[i] = (int32_t)n; break;
    case CFS_INT64: ((int64_t *)buf)[i] = n; break;
    case CFS_UINT8: ((uint8_t *)buf)[i] = (uint8_t)n; break;
    case CFS_UINT16: ((uint16_t *)buf)[i] = (uint16_t)n; break;
    case CFS_UINT32: ((uint32_t *)buf)[i] = (uint32_t)n; break;
    case CFS_UINT64: ((uint64_t *)buf)[i] = (uint64_t)n; break;
    case CFS_FLOAT32: ((float *)buf)[i] = json_is_integer(v) ? (float)n : (float)d; break;
    case CFS_FLOAT64: ((double *)buf)[i] = json_is_integer(v) ? (double)n : d; break;
    default: break;
    }
}

/* A 0-d (list NULL) or 1-d array element of dtype t. */
static inline cfs_elem *uns_values(const char *name, cfs_dtype t, const json_t *scalar,
                             const json_t *list)
{
    uint64_t n = list ? json_array_size(list) : 1;
    void *buf = calloc(n ? n : 1, cfs_dtype_size(t));
    if (!buf)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = list ? json_array_get(list, i) : scalar;
        if (t == CFS_STRING)
            ((char **)buf)[i] = strdup(json_is_string(v) ? json_string_value(v) : "");
        else
            uns_put(t, buf, i, v);
    }
    cfs_elem *el = cfs_elem_new(list ? CFS_EL_ARRAY : CFS_EL_SCALAR, name);
    if (el)
        el->values = cfs_array_from_memory(t, list ? 1 : 0, &n, buf);
    if (!el || !el->values) {
        if (t == CFS_STRING)
            cfs_strings_free(buf, n);
        free(buf);
        cfs_elem_free(el);
        return NULL;
    }
    return el;
}

/* The one kind of value every item of list is (a dtype), or -1. */
static inline int uns_list_dtype(const json_t *list)
{
    size_t i;
    const json_t *v;
    int t = json_array_size(list) ? -2 : CFS_FLOAT64;
    json_array_foreach(list, i, v) {
        int vt = json_is_string(v) ? CFS_STRING : json_is_boolean(v) ? CFS_BOOL
                 : json_is_integer(v) ? CFS_INT64 : json_is_real(v) ? CFS_FLOAT64 : -1;
        if ((t == CFS_INT64 && vt == CFS_FLOAT64) || (t == CFS_FLOAT64 && vt == CFS_INT64))
            vt = CFS_FLOAT64;
        else if (t != -2 && vt != t)
            return -1;
        t = vt;
    }
    return t;
}

static inline int uns_dtype_named(const char *s)
{
    for (int t = CFS_BOOL; s && t <= CFS_FLOAT64; t++)
        if (t != CFS_FLOAT16 && strcmp(cfs_dtype_name((cfs_dtype)t), s) == 0)
            return t;
    return -1;
}

static inline cfs_elem *fuzz_uns_from_json(const char *name, const json_t *v, int depth);

static inline cfs_elem *uns_mapping(const char *name, const json_t *v, int depth)
{
    cfs_elem *el = cfs_elem_new(CFS_EL_DICT, name);
    const char *key;
    const json_t *item;
    char index[24];
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, item) {
            cfs_elem *child = el ? fuzz_uns_from_json(key, item, depth + 1) : NULL;
            if (child && cfs_elem_add(el, child) < 0)
                cfs_elem_free(child);
        }
    } else {
        json_array_foreach(v, i, item) {
            snprintf(index, sizeof index, "%zu", i);
            cfs_elem *child = el ? fuzz_uns_from_json(index, item, depth + 1) : NULL;
            if (child && cfs_elem_add(el, child) < 0)
                cfs_elem_free(child);
        }
    }
    return el;
}

static inline cfs_elem *fuzz_uns_from_json(const char *name, const json_t *v, int depth)
{
    if (depth > 16)
        return NULL;
    if (json_is_object(v)) {
        int t = uns_dtype_named(json_string_value(json_object_get(v, "@dtype")));
        const json_t *data = json_object_get(v, "@data");
        if (t >= 0 && json_is_array(data))
            return uns_values(name, (cfs_dtype)t, NULL, data);
        if (t >= 0 && json_is_number(data))
            return uns_values(name, (cfs_dtype)t, data, NULL);
        return uns_mapping(name, v, depth);
    }
    if (json_is_array(v)) {
        int t = uns_list_dtype(v);
        return t >= 0 ? uns_values(name, (cfs_dtype)t, NULL, v) : uns_mapping(name, v, depth);
    }
    if (json_is_null(v))
        return cfs_elem_new(CFS_EL_NULL, name);
    cfs_dtype t = json_is_string(v) ? CFS_STRING : json_is_boolean(v) ? CFS_BOOL
                  : json_is_integer(v) ? CFS_INT64 : CFS_FLOAT64;
    return uns_values(name, t, v, NULL);
}

#endif

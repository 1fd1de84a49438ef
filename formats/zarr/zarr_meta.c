/*
 * Zarr v2 metadata: .zgroup, .zarray, .zattrs and the consolidated .zmetadata (see
 * zarr_meta.h). zarr-python 2.13 writes them with json.dumps; fill values follow its
 * encode_fill_value (floats "NaN"/"Infinity"/"-Infinity", |S as base64, <U as text).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup, realpath */
#endif

#include "zarr_meta.h"
#include "zarr_codecs.h"
#include "zarr_backend.h"
#include "path.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Metadata documents are small; a bigger one is not Zarr metadata. */
#define ZR_MAX_META (64u << 20)

struct zr_store {
    atomic_int refs;
    /* A group's view (zr_store_group) reads its parent's backend and consolidated metadata
     * under its prefix, so that a MuData modality in a zip is read like a store of its own. */
    zr_store *parent; /* NULL for a whole store */
    char *prefix;     /* "" for a whole store, "mod/rna" for a view */
    zr_backend *b;    /* a view's is its parent's */
    int version;      /* 2 or 3 */
    json_t *meta;     /* v2: .zmetadata's "metadata"; v3: the root's consolidated metadata */
    json_t *root3;    /* v3: the root's (a view: its group's) zarr.json */
};

/* rel of the view as a key of the whole store (malloc'd). */
static char *store_key(const zr_store *s, const char *rel)
{
    return cfs_path_join(s->prefix, rel);
}

bool zr_store_consolidated(const zr_store *s)
{
    return s->meta != NULL;
}

int zr_store_version(const zr_store *s)
{
    return s->version;
}

bool zr_store_zipped(const zr_store *s)
{
    return zr_backend_is_zip(s->b);
}

int zr_file_read(const zr_store *s, const char *rel, unsigned char **data, size_t *len,
                 cfs_err *err)
{
    if (!*s->prefix)
        return zr_backend_read(s->b, rel, data, len, err);
    char *key = store_key(s, rel);
    int rc = key ? zr_backend_read(s->b, key, data, len, err) : cfs_err_oom(err);
    free(key);
    return rc;
}

/* The JSON document at key: 1 with a new reference, 0 if there is none, -1 with the reason. */
static int load_json(const zr_store *s, const char *key, json_t **out, cfs_err *err)
{
    unsigned char *data;
    size_t len;
    int rc = zr_file_read(s, key, &data, &len, err);
    if (rc > 0 && len > ZR_MAX_META)
        rc = cfs_err_setc(err, CFS_EDAMAGED, "%s is %zu bytes, too big for Zarr metadata", key,
                          len);
    if (rc > 0) {
        json_error_t je;
        json_t *j = json_loadb((const char *)data, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!j)
            rc = cfs_err_setc(err, CFS_EDAMAGED, "%s is not JSON (line %d: %s); re-write the "
                              "store with zarr or anndata", key, je.line, je.text);
        else
            *out = j;
    }
    free(data);
    return rc;
}

/* A JSON document of the store: from .zmetadata when listed there, else its file. 1 with a
 * new reference, 0 if there is none, -1 with the reason. */
static int document(const zr_store *s, const char *rel, const char *leaf, json_t **out,
                    cfs_err *err)
{
    *out = NULL;
    char *key = cfs_path_join(rel, leaf);
    char *skey = key ? store_key(s, key) : NULL;
    if (!skey) {
        free(key);
        return cfs_err_oom(err);
    }
    json_t *j = s->version == 2 && s->meta ? json_object_get(s->meta, skey) : NULL;
    int rc = j ? (*out = json_incref(j), 1) : load_json(s, key, out, err);
    free(skey);
    free(key);
    return rc;
}

/* A v3 node's zarr.json: 1 with a new reference, 0 if rel is no node, -1 with the reason. */
static int node3(const zr_store *s, const char *rel, json_t **out, cfs_err *err)
{
    *out = NULL;
    json_t *j = !*rel ? s->root3 : NULL;
    if (!j && *rel && s->meta) {
        char *skey = store_key(s, rel);
        if (!skey)
            return cfs_err_oom(err);
        j = json_object_get(s->meta, skey);
        free(skey);
    }
    if (j) {
        *out = json_incref(j);
        return 1;
    }
    if (s->meta && zr_backend_url(s->b))
        return 0;   /* a folder URL's consolidated metadata lists its nodes: not asked for */
    int rc = document(s, rel, "zarr.json", out, err);
    if (rc > 0 && !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return cfs_err_setc(err, CFS_EDAMAGED, "%s%szarr.json is not a JSON object; re-write "
                            "the store", rel, *rel ? "/" : "");
    }
    return rc;
}

static int open_v2(zr_store *s, cfs_err *err)
{
    json_t *zm;
    int rc = document(s, "", ".zmetadata", &zm, err);
    if (rc <= 0)
        return rc;
    json_t *fmt = json_object_get(zm, "zarr_consolidated_format");
    json_t *meta = json_object_get(zm, "metadata");
    if (!json_is_integer(fmt) || json_integer_value(fmt) != 1 || !json_is_object(meta)) {
        json_decref(zm);
        return cfs_err_setc(err, CFS_EDAMAGED, ".zmetadata is not consolidated metadata "
                            "(zarr_consolidated_format 1 with a metadata object); delete it "
                            "or re-consolidate the store (zarr.consolidate_metadata)");
    }
    s->meta = json_incref(meta);
    json_decref(zm);
    return 0;
}

static int open_v3(zr_store *s, cfs_err *err)
{
    json_t *fmt = json_object_get(s->root3, "zarr_format");
    if (!json_is_object(s->root3) || !json_is_integer(fmt) || json_integer_value(fmt) != 3)
        return cfs_err_setc(err, CFS_EDAMAGED, "zarr.json is not Zarr v3 metadata (an object "
                            "with zarr_format 3); re-write the store with zarr or anndata");
    json_t *cm = json_object_get(s->root3, "consolidated_metadata");
    if (!cm || json_is_null(cm))
        return 0;
    json_t *kind = json_object_get(cm, "kind");
    json_t *meta = json_object_get(cm, "metadata");
    if (!json_is_string(kind) || strcmp(json_string_value(kind), "inline") != 0 ||
        !json_is_object(meta))
        return cfs_err_setc(err, CFS_EDAMAGED, "zarr.json's consolidated_metadata is not "
                            "inline metadata (kind \"inline\" with a metadata object); "
                            "re-consolidate the store (zarr.consolidate_metadata)");
    s->meta = json_incref(meta);
    return 0;
}

/* A folder URL is read from its consolidated metadata alone: HTTP lists no folder, and an
 * AnnData store's attributes do not name all its nodes (obsm's, layers', uns' members). */
static int unlisted_url(cfs_err *err)
{
    return cfs_err_setc(err, CFS_EREFUSED, "a Zarr folder without consolidated metadata "
                        "(neither Zarr v2's .zmetadata nor Zarr v3's consolidated_metadata in "
                        "zarr.json), which is how a Zarr folder is read over HTTP, since HTTP "
                        "lists no folder; consolidate the store (zarr.consolidate_metadata) or "
                        "serve it zipped (.zarr.zip)");
}

int zr_store_open(const char *path, zr_store **out, cfs_err *err)
{
    *out = NULL;
    zr_store *s = calloc(1, sizeof *s);
    if (!s || !(s->prefix = strdup(""))) {
        free(s);
        return cfs_err_oom(err);
    }
    atomic_init(&s->refs, 1);
    int rc = zr_backend_open(path, &s->b, err);
    if (rc == 0)
        rc = load_json(s, "zarr.json", &s->root3, err);
    if (rc > 0) {
        s->version = 3;
        rc = open_v3(s, err);
    } else if (rc == 0) {
        s->version = 2;
        rc = open_v2(s, err);
    }
    if (rc == 0 && !s->meta && zr_backend_url(s->b))
        rc = unlisted_url(err);
    if (rc < 0) {
        zr_store_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int zr_store_group(zr_store *parent, const char *rel, zr_store **out, cfs_err *err)
{
    *out = NULL;
    if (zr_node_kind(parent, rel) != ZR_GROUP)
        return cfs_err_setc(err, CFS_EDAMAGED, "%s is not a Zarr group", rel);
    zr_store *s = calloc(1, sizeof *s);
    if (!s || !(s->prefix = store_key(parent, rel))) {
        free(s);
        return cfs_err_oom(err);
    }
    atomic_init(&s->refs, 1);
    s->parent = zr_store_ref(parent);
    s->b = parent->b;
    s->version = parent->version;
    s->meta = parent->meta;
    if (s->version == 3 && node3(parent, rel, &s->root3, err) <= 0) {
        zr_store_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

zr_store *zr_store_ref(zr_store *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

void zr_store_free(zr_store *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) > 1)
        return;
    json_decref(s->root3);
    if (s->parent) {
        zr_store_free(s->parent);
    } else {
        json_decref(s->meta);
        zr_backend_free(s->b);
    }
    free(s->prefix);
    free(s);
}

static bool has_doc(const zr_store *s, const char *rel, const char *leaf)
{
    char *key = cfs_path_join(rel, leaf);
    char *skey = key ? store_key(s, key) : NULL;
    bool yes = skey && ((s->meta && json_object_get(s->meta, skey)) ||
                        zr_backend_has(s->b, skey));
    free(skey);
    free(key);
    return yes;
}

zr_kind zr_node_kind(const zr_store *s, const char *rel)
{
    if (s->version == 3) {
        json_t *j;
        cfs_err ignore;
        int rc = node3(s, rel, &j, &ignore);
        /* a zarr.json that cannot be read counts as an array's, so that opening it says why */
        if (rc < 0)
            return ZR_ARRAY;
        if (rc == 0)
            return ZR_NONE;
        const char *t = json_string_value(json_object_get(j, "node_type"));
        zr_kind k = !t ? ZR_NONE : strcmp(t, "array") == 0 ? ZR_ARRAY
                  : strcmp(t, "group") == 0 ? ZR_GROUP : ZR_NONE;
        json_decref(j);
        return k;
    }
    if (has_doc(s, rel, ".zarray"))
        return ZR_ARRAY;
    if (has_doc(s, rel, ".zgroup"))
        return ZR_GROUP;
    return ZR_NONE;
}

int zr_attrs(const zr_store *s, const char *rel, json_t **out, cfs_err *err)
{
    int rc;
    const char *what = ".zattrs";
    if (s->version == 3) {
        json_t *node;
        what = "zarr.json's attributes";
        rc = node3(s, rel, &node, err);
        if (rc > 0) {
            json_t *a = json_object_get(node, "attributes");
            *out = a ? json_incref(a) : NULL;
            rc = a ? 1 : 0;
            json_decref(node);
        }
    } else {
        rc = document(s, rel, ".zattrs", out, err);
    }
    if (rc < 0)
        return -1;
    if (rc == 0)
        return (*out = json_object()) ? 0 : cfs_err_oom(err);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return cfs_err_setc(err, CFS_EDAMAGED, "%s%s%s is not a JSON object", rel,
                            *rel ? "/" : "", what);
    }
    return 0;
}

void zr_names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int push_name(char ***names, size_t *n, size_t *cap, const char *name, size_t len)
{
    for (size_t i = 0; i < *n; i++)
        if (strlen((*names)[i]) == len && strncmp((*names)[i], name, len) == 0)
            return 0;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        char **p = realloc(*names, c * sizeof *p);
        if (!p)
            return -1;
        *names = p;
        *cap = c;
    }
    if (!((*names)[*n] = strndup(name, len)))
        return -1;
    (*n)++;
    return 0;
}

/* The child's name when key (a consolidated metadata key) names a direct child node of rel:
 * v2 "<rel>/<child>/.zarray" or ".zgroup", v3 "<rel>/<child>". */
static const char *consolidated_child(const zr_store *s, const char *rel, const char *key,
                                      size_t *len)
{
    size_t plen = strlen(rel);
    if (plen && (strncmp(key, rel, plen) != 0 || key[plen] != '/'))
        return NULL;
    const char *child = key + (plen ? plen + 1 : 0);
    const char *slash = strchr(child, '/');
    if (s->version == 3) {
        *len = strlen(child);
        return *child && !slash ? child : NULL;
    }
    if (!slash || slash == child)
        return NULL;
    if (strcmp(slash, "/.zarray") != 0 && strcmp(slash, "/.zgroup") != 0)
        return NULL;
    *len = (size_t)(slash - child);
    return child;
}

int zr_children(const zr_store *s, const char *rel, char ***names, size_t *n, cfs_err *err)
{
    *names = NULL;
    *n = 0;
    size_t cap = 0, len;
    const char *key, *child;
    json_t *v;
    char *srel = store_key(s, rel);
    if (!srel)
        return cfs_err_oom(err);
    if (s->meta)
        json_object_foreach(s->meta, key, v) {
            if ((child = consolidated_child(s, srel, key, &len)) &&
                push_name(names, n, &cap, child, len) < 0) {
                free(srel);
                goto oom;
            }
        }
    /* and the sub-folders that are nodes (keys the consolidated metadata does not list) */
    char **list = NULL;
    size_t nlist = 0;
    int rc = zr_backend_dirs(s->b, srel, &list, &nlist, err);
    free(srel);
    if (rc < 0) {
        zr_names_free(*names, *n);
        *names = NULL;
        *n = 0;
        return -1;
    }
    for (size_t i = 0; i < nlist; i++) {
        char *crel = cfs_path_join(rel, list[i]);
        bool node = crel && zr_node_kind(s, crel) != ZR_NONE;
        free(crel);
        if (node && push_name(names, n, &cap, list[i], strlen(list[i])) < 0) {
            zr_names_free(list, nlist);
            goto oom;
        }
    }
    zr_names_free(list, nlist);
    if (*n > 1)
        qsort(*names, *n, sizeof **names, cmp_names);
    return 0;
oom:
    zr_names_free(*names, *n);
    *names = NULL;
    *n = 0;
    return cfs_err_oom(err);
}

/* ------------------------------------------------------------------------------------------ */
/* .zarray */

static int parse_dtype(const char *s, zr_meta *m, cfs_err *err)
{
    char order = s[0];
    if (order != '<' && order != '>' && order != '|' && order != '=')
        return cfs_err_set(err, "its dtype '%s' is not a NumPy type string", s);
    char kind = s[1];
    char *end;
    long size = kind && s[2] ? strtol(s + 2, &end, 10) : -1;
    bool sized = size > 0 && *end == '\0';
    m->big_endian = order == '>';
    m->itemsize = sized ? (size_t)size : 0;
    switch (kind) {
    case 'b':
        if (!sized || size != 1)
            break;
        m->tkind = ZR_T_BOOL;
        m->dtype = CFS_BOOL;
        return 0;
    case 'i':
    case 'u': {
        static const cfs_dtype si[] = {CFS_INT8, CFS_INT16, 0, CFS_INT32, 0, 0, 0, CFS_INT64};
        static const cfs_dtype ui[] = {CFS_UINT8, CFS_UINT16, 0, CFS_UINT32, 0, 0, 0, CFS_UINT64};
        if (!sized || (size != 1 && size != 2 && size != 4 && size != 8))
            break;
        m->tkind = kind == 'i' ? ZR_T_INT : ZR_T_UINT;
        m->dtype = kind == 'i' ? si[size - 1] : ui[size - 1];
        return 0;
    }
    case 'f':
        if (!sized || (size != 2 && size != 4 && size != 8))
            break;
        m->tkind = ZR_T_FLOAT;
        m->dtype = size == 2 ? CFS_FLOAT16 : size == 4 ? CFS_FLOAT32 : CFS_FLOAT64;
        return 0;
    case 'U':
        if (!sized || size > (1 << 24))
            break;
        m->tkind = ZR_T_UNICODE;
        m->itemsize = (size_t)size * 4;
        m->dtype = CFS_STRING;
        return 0;
    case 'S':
        if (!sized || size > (1 << 26))
            break;
        m->tkind = ZR_T_BYTES;
        m->dtype = CFS_STRING;
        return 0;
    case 'O':
        if (s[2])
            break;
        m->tkind = ZR_T_OBJECT;
        m->dtype = CFS_STRING;
        return 0;
    case 'c':
        return cfs_err_set(err, "it holds complex numbers (dtype '%s'), which cellucid cannot "
                           "show", s);
    case 'M':
    case 'm':
        return cfs_err_set(err, "it holds dates or durations (dtype '%s'), which this version "
                           "does not serve; store them as strings", s);
    default: break;
    }
    return cfs_err_set(err, "its dtype '%s' is not one this version reads", s);
}

static int parse_dims(json_t *j, const char *what, int *ndim, uint64_t *out, cfs_err *err)
{
    if (!json_is_array(j))
        return cfs_err_set(err, "its %s is not a list", what);
    size_t n = json_array_size(j);
    if (n > CFS_MAX_DIMS)
        return cfs_err_set(err, "it has %zu dimensions, more than the %d this version reads", n,
                           CFS_MAX_DIMS);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(j, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return cfs_err_set(err, "its %s holds %s, not a non-negative integer", what,
                               json_is_integer(v) ? "a negative number" : "a non-integer");
        out[i] = (uint64_t)json_integer_value(v);
    }
    *ndim = (int)n;
    return 0;
}

static uint16_t half_from_double(double d)
{
    if (isnan(d))
        return 0x7e00;
    uint16_t sign = signbit(d) ? 0x8000 : 0;
    d = fabs(d);
    if (d >= 65520.0)
        return sign | 0x7c00;
    if (d < 5.9604644775390625e-08 / 2)
        return sign;
    int e;
    double f = frexp(d, &e); /* d = f * 2^e, f in [0.5, 1) */
    int exp = e - 1 + 15;
    if (exp <= 0) /* subnormal: units of 2^-24 */
        return sign | (uint16_t)lrint(d / 5.9604644775390625e-08);
    uint32_t mant = (uint32_t)lrint((f * 2 - 1) * 1024);
    if (mant == 1024) {
        mant = 0;
        exp++;
    }
    if (exp >= 31)
        return sign | 0x7c00;
    return sign | (uint16_t)(exp << 10) | (uint16_t)mant;
}

static void put_le(unsigned char *out, uint64_t v, size_t size)
{
    for (size_t i = 0; i < size; i++)
        out[i] = (unsigned char)(v >> (8 * i));
}

static int base64_decode(const char *s, unsigned char **out, size_t *len)
{
    size_t n = strlen(s);
    unsigned char *buf = malloc(n / 4 * 3 + 3);
    if (!buf)
        return -1;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
              : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' ? 62 : c == '/' ? 63 : -1;
        if (v < 0)
            continue;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[k++] = (unsigned char)(acc >> bits);
        }
    }
    *out = buf;
    *len = k;
    return 0;
}

static int parse_fill(json_t *fv, zr_meta *m, cfs_err *err)
{
    memset(m->fill, 0, sizeof m->fill);
    size_t size = cfs_dtype_size(m->dtype);
    if (m->dtype == CFS_STRING) {
        const char *t = json_is_string(fv) ? json_string_value(fv) : "";
        if (m->tkind == ZR_T_BYTES && json_is_string(fv)) {
            unsigned char *raw;
            size_t len;
            if (base64_decode(t, &raw, &len) < 0)
                return cfs_err_oom(err);
            while (len && raw[len - 1] == 0)
                len--;
            m->fill_str = cfs_text_to_utf8((const char *)raw, len);
            free(raw);
        } else {
            m->fill_str = strdup(t);
        }
        return m->fill_str ? 0 : cfs_err_oom(err);
    }
    if (json_is_null(fv))
        return 0;
    if (m->tkind == ZR_T_FLOAT) {
        double d;
        if (json_is_number(fv))
            d = json_number_value(fv);
        else if (json_is_string(fv) && strcmp(json_string_value(fv), "NaN") == 0)
            d = NAN;
        else if (json_is_string(fv) && strcmp(json_string_value(fv), "Infinity") == 0)
            d = INFINITY;
        else if (json_is_string(fv) && strcmp(json_string_value(fv), "-Infinity") == 0)
            d = -INFINITY;
        else
            return cfs_err_set(err, "its fill_value is not a number");
        if (size == 2) {
            put_le(m->fill, half_from_double(d), 2);
        } else if (size == 4) {
            float f = (float)d;
            uint32_t u;
            memcpy(&u, &f, 4);
            put_le(m->fill, u, 4);
        } else {
            uint64_t u;
            memcpy(&u, &d, 8);
            put_le(m->fill, u, 8);
        }
        return 0;
    }
    if (m->tkind == ZR_T_BOOL) {
        m->fill[0] = json_is_true(fv) || (json_is_integer(fv) && json_integer_value(fv) != 0);
        return 0;
    }
    if (json_is_integer(fv)) {
        put_le(m->fill, (uint64_t)json_integer_value(fv), size);
        return 0;
    }
    if (json_is_real(fv)) { /* an integer written as 0.0 */
        put_le(m->fill, (uint64_t)(int64_t)json_real_value(fv), size);
        return 0;
    }
    return cfs_err_set(err, "its fill_value is not an integer");
}

/* The filters: none, or (object arrays) the one object codec. Anything else is a codec this
 * version does not decode. */
static int parse_filters(json_t *filters, zr_meta *m, cfs_err *err)
{
    size_t n = json_is_array(filters) ? json_array_size(filters) : 0;
    if (!json_is_null(filters) && !json_is_array(filters))
        return cfs_err_set(err, "its filters are not a list");
    for (size_t i = 0; i < n; i++) {
        json_t *f = json_array_get(filters, i);
        const char *id = json_string_value(json_object_get(f, "id"));
        if (!id)
            return cfs_err_set(err, "a filter without an id");
        bool vlen = strcmp(id, "vlen-utf8") == 0 || strcmp(id, "vlen-bytes") == 0;
        if (vlen && m->tkind == ZR_T_OBJECT && i == 0 && m->object_codec == ZR_VLEN_NONE) {
            m->object_codec = id[5] == 'u' ? ZR_VLEN_UTF8 : ZR_VLEN_BYTES;
            continue;
        }
        return cfs_err_setc(err, CFS_EREFUSED, "it is encoded with the codec '%s' (a filter), "
                            "which this version cannot decode; re-write it without that filter",
                            id);
    }
    if (m->tkind == ZR_T_OBJECT && m->object_codec == ZR_VLEN_NONE) {
        json_t *f = n ? json_array_get(filters, 0) : NULL;
        const char *id = f ? json_string_value(json_object_get(f, "id")) : NULL;
        return cfs_err_setc(err, CFS_EREFUSED, "it holds Python objects %s%s%s, which this "
                            "version cannot decode (it reads vlen-utf8 and vlen-bytes strings)",
                            id ? "encoded with the codec '" : "without an object codec",
                            id ? id : "", id ? "'" : "");
    }
    return 0;
}

static int meta_read3(const zr_store *s, const char *rel, zr_meta *m, cfs_err *err);

static int chunks_check(const zr_meta *m, cfs_err *err)
{
    for (int d = 0; d < m->ndim; d++)
        if (m->chunks[d] == 0 && m->shape[d] > 0)
            return cfs_err_set(err, "its chunks are empty along axis %d", d);
    return 0;
}

int zr_meta_read(const zr_store *s, const char *rel, zr_meta *m, cfs_err *err)
{
    memset(m, 0, sizeof *m);
    if (s->version == 3)
        return meta_read3(s, rel, m, err);
    json_t *j;
    int rc = document(s, rel, ".zarray", &j, err);
    if (rc == 0)
        return cfs_err_set(err, "it has no .zarray");
    if (rc < 0)
        return -1;
    rc = -1;
    json_t *fmt = json_object_get(j, "zarr_format");
    json_t *dtype = json_object_get(j, "dtype");
    json_t *order = json_object_get(j, "order");
    json_t *sep = json_object_get(j, "dimension_separator");
    json_t *comp = json_object_get(j, "compressor");
    int cdims = 0;
    if (!json_is_object(j))
        cfs_err_set(err, "its .zarray is not a JSON object");
    else if (!json_is_integer(fmt) || json_integer_value(fmt) != 2)
        cfs_err_set(err, "its .zarray is not Zarr format 2 (zarr_format %s); this version reads "
                    "Zarr v2 stores", json_is_integer(fmt) ? "other than 2" : "missing");
    else if (parse_dims(json_object_get(j, "shape"), "shape", &m->ndim, m->shape, err) < 0 ||
             parse_dims(json_object_get(j, "chunks"), "chunks", &cdims, m->chunks, err) < 0)
        ;
    else if (cdims != m->ndim)
        cfs_err_set(err, "its chunks have %d dimensions but its shape %d", cdims, m->ndim);
    else if (json_is_array(dtype))
        cfs_err_set(err, "it holds records (a structured dtype), which this version reads from "
                    ".h5ad files only");
    else if (!json_is_string(dtype))
        cfs_err_set(err, "its dtype is missing");
    else if (parse_dtype(json_string_value(dtype), m, err) < 0)
        ;
    else if (order && !(json_is_string(order) && (strcmp(json_string_value(order), "C") == 0 ||
                                                   strcmp(json_string_value(order), "F") == 0)))
        cfs_err_set(err, "its order is not \"C\" or \"F\"");
    else if (sep && !(json_is_string(sep) && (strcmp(json_string_value(sep), ".") == 0 ||
                                              strcmp(json_string_value(sep), "/") == 0)))
        cfs_err_set(err, "its dimension_separator is not \".\" or \"/\"");
    else if (!json_is_null(comp) && comp && !json_is_object(comp))
        cfs_err_set(err, "its compressor is not an object or null");
    else if (json_is_object(comp) && zr_codec_check(comp, err) < 0)
        ;
    else if (parse_filters(json_object_get(j, "filters"), m, err) < 0 ||
             parse_fill(json_object_get(j, "fill_value"), m, err) < 0)
        ;
    else
        rc = chunks_check(m, err);
    if (rc == 0) {
        bool fortran = order && strcmp(json_string_value(order), "F") == 0;
        for (int d = 0; d < m->ndim; d++)
            m->perm[d] = fortran ? m->ndim - 1 - d : d;
        m->sep = sep && strcmp(json_string_value(sep), "/") == 0 ? '/' : '.';
        m->compressor = json_is_object(comp) ? json_incref(comp) : NULL;
    } else {
        zr_meta_clear(m);
    }
    json_decref(j);
    return rc;
}

void zr_meta_clear(zr_meta *m)
{
    json_decref(m->compressor);
    json_decref(m->b2b);
    m->b2b = NULL;
    free(m->fill_str);
    m->compressor = NULL;
    m->fill_str = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* zarr.json (Zarr v3) */

static const char *cfg_string(json_t *codec, const char *key)
{
    return json_string_value(json_object_get(json_object_get(codec, "configuration"), key));
}

/* A v3 data_type: a name, or an object with a name and a configuration. */
static int parse_dtype3(json_t *dt, zr_meta *m, cfs_err *err)
{
    static const struct { const char *name, *v2; } simple[] = {
        {"bool", "|b1"}, {"int8", "|i1"}, {"int16", "<i2"}, {"int32", "<i4"}, {"int64", "<i8"},
        {"uint8", "|u1"}, {"uint16", "<u2"}, {"uint32", "<u4"}, {"uint64", "<u8"},
        {"float16", "<f2"}, {"float32", "<f4"}, {"float64", "<f8"}, {NULL, NULL}};
    const char *name = json_is_string(dt) ? json_string_value(dt)
                                          : json_string_value(json_object_get(dt, "name"));
    if (!name)
        return cfs_err_set(err, "its data_type is missing");
    for (size_t i = 0; simple[i].name; i++)
        if (strcmp(name, simple[i].name) == 0)
            return parse_dtype(simple[i].v2, m, err);
    if (strcmp(name, "string") == 0 || strcmp(name, "variable_length_utf8") == 0 ||
        strcmp(name, "bytes") == 0 || strcmp(name, "variable_length_bytes") == 0)
        return parse_dtype("|O", m, err);
    json_t *lb = json_object_get(json_object_get(dt, "configuration"), "length_bytes");
    if ((strcmp(name, "fixed_length_utf32") == 0 || strcmp(name, "null_terminated_bytes") == 0)
        && json_is_integer(lb) && json_integer_value(lb) > 0 &&
        json_integer_value(lb) < (1 << 26)) {
        char v2[32];
        bool utf32 = name[0] == 'f';
        snprintf(v2, sizeof v2, "%c%c%lld", utf32 ? '<' : '|', utf32 ? 'U' : 'S',
                 (long long)json_integer_value(lb) / (utf32 ? 4 : 1));
        return parse_dtype(v2, m, err);
    }
    return cfs_err_setc(err, CFS_EREFUSED, "its data_type '%s' is not one this version reads",
                        name);
}

static int index_codecs_check(json_t *codecs, zr_meta *m, cfs_err *err)
{
    size_t n = json_array_size(codecs);
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(codecs, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *endian = cfg_string(c, "endian");
        if (name && i == 0 && strcmp(name, "bytes") == 0 && (!endian ||
                                                             strcmp(endian, "little") == 0))
            continue;
        if (name && i == 1 && strcmp(name, "crc32c") == 0) {
            m->index_crc = true;
            continue;
        }
        return cfs_err_setc(err, CFS_EREFUSED, "its shard index is encoded with the codec "
                            "'%s', which this version cannot decode (it reads bytes little "
                            "and crc32c)", name ? name : "?");
    }
    return n ? 0 : cfs_err_set(err, "its sharding_indexed codec has no index_codecs");
}

static int parse_codecs3(json_t *codecs, zr_meta *m, bool inner, cfs_err *err);

static int parse_sharding(json_t *codec, zr_meta *m, cfs_err *err)
{
    json_t *cfg = json_object_get(codec, "configuration");
    int nd = 0;
    uint64_t inner[CFS_MAX_DIMS];
    if (parse_dims(json_object_get(cfg, "chunk_shape"), "inner chunk_shape", &nd, inner,
                   err) < 0)
        return -1;
    if (nd != m->ndim)
        return cfs_err_set(err, "its inner chunks have %d dimensions but its shape %d", nd,
                           m->ndim);
    for (int d = 0; d < nd; d++) {
        if (inner[d] == 0 || m->chunks[d] % inner[d] != 0)
            return cfs_err_set(err, "its shards are not a whole number of inner chunks along "
                               "axis %d", d);
        m->shard[d] = m->chunks[d];
        m->chunks[d] = inner[d];
    }
    const char *loc = json_string_value(json_object_get(cfg, "index_location"));
    if (loc && strcmp(loc, "start") != 0 && strcmp(loc, "end") != 0)
        return cfs_err_set(err, "its shard index_location is not \"start\" or \"end\"");
    m->index_at_start = loc && strcmp(loc, "start") == 0;
    m->sharded = true;
    if (index_codecs_check(json_object_get(cfg, "index_codecs"), m, err) < 0)
        return -1;
    return parse_codecs3(json_object_get(cfg, "codecs"), m, true, err);
}

/* The codecs: array-to-array (transpose), one array-to-bytes (bytes, vlen-utf8, vlen-bytes,
 * or, outside a shard, sharding_indexed), then bytes-to-bytes (blosc, zstd, gzip, crc32c). */
static int parse_codecs3(json_t *codecs, zr_meta *m, bool inner, cfs_err *err)
{
    if (!json_is_array(codecs))
        return cfs_err_set(err, "its codecs are not a list");
    int phase = 0;
    for (int d = 0; d < m->ndim; d++)
        m->perm[d] = d;
    if (!(m->b2b = json_array()))
        return cfs_err_oom(err);
    for (size_t i = 0; i < json_array_size(codecs); i++) {
        json_t *c = json_array_get(codecs, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        if (!name)
            return cfs_err_set(err, "a codec without a name");
        if (strcmp(name, "transpose") == 0 && phase == 0) {
            json_t *order = json_object_get(json_object_get(c, "configuration"), "order");
            int perm[CFS_MAX_DIMS], seen = 0;
            if (!json_is_array(order) || (int)json_array_size(order) != m->ndim)
                return cfs_err_set(err, "its transpose order is not a list of its axes");
            for (int d = 0; d < m->ndim; d++) {
                json_t *v = json_array_get(order, (size_t)d);
                long long k = json_is_integer(v) ? json_integer_value(v) : -1;
                if (k < 0 || k >= m->ndim || (seen & (1 << k)))
                    return cfs_err_set(err, "its transpose order is not a permutation");
                seen |= 1 << k;
                perm[d] = m->perm[k];
            }
            memcpy(m->perm, perm, sizeof perm);
        } else if (strcmp(name, "bytes") == 0 && phase == 0) {
            const char *endian = cfg_string(c, "endian");
            if (m->tkind == ZR_T_OBJECT)
                return cfs_err_set(err, "its strings are encoded with bytes, not vlen-utf8");
            if (endian && strcmp(endian, "big") != 0 && strcmp(endian, "little") != 0)
                return cfs_err_set(err, "its bytes codec's endian is not big or little");
            m->big_endian = endian && strcmp(endian, "big") == 0 && m->itemsize > 1 &&
                            m->tkind != ZR_T_BYTES;
            phase = 1;
        } else if ((strcmp(name, "vlen-utf8") == 0 || strcmp(name, "vlen-bytes") == 0) &&
                   phase == 0 && m->tkind == ZR_T_OBJECT) {
            m->object_codec = name[5] == 'u' ? ZR_VLEN_UTF8 : ZR_VLEN_BYTES;
            phase = 1;
        } else if (strcmp(name, "sharding_indexed") == 0 && phase == 0 && !inner) {
            if (json_array_size(codecs) != i + 1)
                return cfs_err_setc(err, CFS_EREFUSED, "it has codecs after sharding_indexed, "
                                    "which this version cannot decode");
            json_decref(m->b2b);
            m->b2b = NULL;
            return parse_sharding(c, m, err);
        } else if (phase == 1 && (strcmp(name, "gzip") == 0 || strcmp(name, "zstd") == 0 ||
                                  strcmp(name, "blosc") == 0 || strcmp(name, "crc32c") == 0)) {
            if (json_array_append(m->b2b, c) < 0)
                return cfs_err_oom(err);
        } else {
            return cfs_err_setc(err, CFS_EREFUSED, "it is encoded with the codec '%s'%s, which "
                                "this version cannot decode (it reads transpose, bytes, "
                                "vlen-utf8, vlen-bytes, sharding_indexed, blosc, zstd, gzip "
                                "and crc32c); re-write it with those", name,
                                phase ? "" : " where an array codec belongs");
        }
    }
    if (phase == 0)
        return cfs_err_set(err, "its codecs have no bytes codec");
    return 0;
}

/* v3 fill values: numbers, "NaN"/"Infinity"/"-Infinity", or a float's raw bits as "0x..." */
static int parse_fill3(json_t *fv, zr_meta *m, cfs_err *err)
{
    const char *t = json_string_value(fv);
    if (m->tkind == ZR_T_FLOAT && t && t[0] == '0' && t[1] == 'x') {
        char *end;
        unsigned long long bits = strtoull(t + 2, &end, 16);
        if (*end)
            return cfs_err_set(err, "its fill_value '%s' is not a number", t);
        memset(m->fill, 0, sizeof m->fill);
        put_le(m->fill, bits, m->itemsize);
        return 0;
    }
    if (m->tkind == ZR_T_BYTES && json_is_array(fv))
        return (m->fill_str = strdup("")) ? 0 : cfs_err_oom(err);
    return parse_fill(fv, m, err);
}

static int meta_read3(const zr_store *s, const char *rel, zr_meta *m, cfs_err *err)
{
    json_t *j;
    int rc = node3(s, rel, &j, err);
    if (rc == 0)
        return cfs_err_set(err, "it has no zarr.json");
    if (rc < 0)
        return -1;
    rc = -1;
    const char *type = json_string_value(json_object_get(j, "node_type"));
    json_t *grid = json_object_get(j, "chunk_grid");
    json_t *keys = json_object_get(j, "chunk_key_encoding");
    const char *gname = json_string_value(json_object_get(grid, "name"));
    const char *kname = json_string_value(json_object_get(keys, "name"));
    const char *sep = cfg_string(keys, "separator");
    int cdims = 0;
    if (!type || strcmp(type, "array") != 0)
        cfs_err_set(err, "its zarr.json is not an array's");
    else if (parse_dims(json_object_get(j, "shape"), "shape", &m->ndim, m->shape, err) < 0)
        ;
    else if (!gname || strcmp(gname, "regular") != 0)
        cfs_err_setc(err, CFS_EREFUSED, "its chunk_grid '%s' is not one this version reads "
                     "(regular)", gname ? gname : "?");
    else if (parse_dims(json_object_get(json_object_get(grid, "configuration"), "chunk_shape"),
                        "chunk_shape", &cdims, m->chunks, err) < 0)
        ;
    else if (cdims != m->ndim)
        cfs_err_set(err, "its chunks have %d dimensions but its shape %d", cdims, m->ndim);
    else if (!kname || (strcmp(kname, "default") != 0 && strcmp(kname, "v2") != 0))
        cfs_err_setc(err, CFS_EREFUSED, "its chunk_key_encoding '%s' is not one this version "
                     "reads (default, v2)", kname ? kname : "?");
    else if (sep && strcmp(sep, ".") != 0 && strcmp(sep, "/") != 0)
        cfs_err_set(err, "its chunk key separator is not \".\" or \"/\"");
    else if (parse_dtype3(json_object_get(j, "data_type"), m, err) < 0)
        ;
    else if (parse_codecs3(json_object_get(j, "codecs"), m, false, err) < 0)
        ;
    else if (parse_fill3(json_object_get(j, "fill_value"), m, err) < 0)
        ;
    else
        rc = chunks_check(m, err);
    if (rc == 0) {
        m->key_prefix_c = strcmp(kname, "default") == 0;
        m->sep = sep ? sep[0] : m->key_prefix_c ? '/' : '.';
    } else {
        zr_meta_clear(m);
    }
    json_decref(j);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* attributes */

int zr_attr_string(json_t *attrs, const char *key, char **out, cfs_err *err)
{
    *out = NULL;
    json_t *v = json_object_get(attrs, key);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return cfs_err_set(err, "its %s attribute is not a string", key);
    return (*out = strdup(json_string_value(v))) ? 1 : cfs_err_oom(err);
}

int zr_attr_strings(json_t *attrs, const char *key, char ***out, size_t *n, cfs_err *err)
{
    *out = NULL;
    *n = 0;
    json_t *v = json_object_get(attrs, key);
    if (!v)
        return 0;
    size_t len = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v))
        return cfs_err_set(err, "its %s attribute is not a list of strings", key);
    char **list = calloc(len ? len : 1, sizeof *list);
    if (!list)
        return cfs_err_oom(err);
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(e)) {
            zr_names_free(list, i);
            return cfs_err_set(err, "its %s attribute is not a list of strings", key);
        }
        if (!(list[i] = strdup(json_string_value(e)))) {
            zr_names_free(list, i);
            return cfs_err_oom(err);
        }
    }
    *out = list;
    *n = len;
    return 1;
}

int zr_attr_bool(json_t *attrs, const char *key, bool *out, cfs_err *err)
{
    json_t *v = json_object_get(attrs, key);
    if (!v)
        return 0;
    if (json_is_boolean(v))
        *out = json_is_true(v);
    else if (json_is_integer(v))
        *out = json_integer_value(v) != 0;
    else
        return cfs_err_set(err, "its %s attribute is not a boolean", key);
    return 1;
}

int zr_attr_shape2(json_t *attrs, const char *key, uint64_t out[2], cfs_err *err)
{
    json_t *v = json_object_get(attrs, key);
    if (!v)
        return 0;
    if (!json_is_array(v) || json_array_size(v) != 2)
        return cfs_err_set(err, "its %s attribute is not two integers", key);
    for (size_t i = 0; i < 2; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return cfs_err_set(err, "its %s attribute is not two non-negative integers", key);
        out[i] = (uint64_t)json_integer_value(e);
    }
    return 1;
}

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
#include "path.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Metadata documents are small; a bigger one is not Zarr metadata. */
#define ZR_MAX_META (64u << 20)
/* A chunk file bigger than this is refused rather than read (a corrupt store). */
#define ZR_MAX_FILE ((size_t)1 << 31)

struct zr_store {
    char *root;       /* as given */
    char *real_root;  /* resolved, for the symlink check */
    json_t *meta;     /* .zmetadata's "metadata" object, or NULL */
};

bool zr_store_consolidated(const zr_store *s)
{
    return s->meta != NULL;
}

/* The resolved path of rel, if it stays inside the store: 1; 0 if it does not exist; -1 if it
 * leads out of the store (err says so). */
static int resolve(const zr_store *s, const char *rel, char **out, cfs_err *err)
{
    char *full = cfs_path_join(s->root, rel);
    if (!full)
        return cfs_err_oom(err);
    char *real = realpath(full, NULL);
    free(full);
    if (!real) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        return cfs_err_setc(err, CFS_EIO, "%s cannot be resolved: %s", rel, strerror(errno));
    }
    size_t n = strlen(s->real_root);
    if (strncmp(real, s->real_root, n) != 0 || (real[n] != '/' && real[n] != '\0')) {
        free(real);
        return cfs_err_setc(err, CFS_EREFUSED, "%s is a symlink leading out of the store, "
                            "which is not followed; copy what it points to into the store", rel);
    }
    *out = real;
    return 1;
}

int zr_file_read(const zr_store *s, const char *rel, unsigned char **data, size_t *len,
                 cfs_err *err)
{
    *data = NULL;
    *len = 0;
    char *path = NULL;
    int rc = resolve(s, rel, &path, err);
    if (rc <= 0)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    free(path);
    if (fd < 0)
        return errno == ENOENT ? 0
                               : cfs_err_setc(err, CFS_EIO, "%s cannot be opened: %s", rel,
                                              strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return S_ISDIR(st.st_mode) ? 0 : cfs_err_setc(err, CFS_EIO, "%s is not a file", rel);
    }
    if ((uint64_t)st.st_size > ZR_MAX_FILE) {
        close(fd);
        return cfs_err_setc(err, CFS_EDAMAGED, "%s is %llu bytes, more than a chunk may be",
                            rel, (unsigned long long)st.st_size);
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return cfs_err_oom(err);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            return cfs_err_setc(err, CFS_EIO, "%s cannot be read: %s", rel,
                                e ? strerror(e) : "it shrank while being read");
        }
        got += (size_t)r;
    }
    close(fd);
    *data = buf;
    *len = n;
    return 1;
}

/* A JSON document of the store: from .zmetadata when listed there, else its file. 1 with a
 * new reference, 0 if there is none, -1 with the reason. */
static int document(const zr_store *s, const char *rel, const char *leaf, json_t **out,
                    cfs_err *err)
{
    *out = NULL;
    char *key = cfs_path_join(rel, leaf);
    if (!key)
        return cfs_err_oom(err);
    json_t *j = s->meta ? json_object_get(s->meta, key) : NULL;
    if (j) {
        free(key);
        *out = json_incref(j);
        return 1;
    }
    unsigned char *data;
    size_t len;
    int rc = zr_file_read(s, key, &data, &len, err);
    if (rc > 0 && len > ZR_MAX_META)
        rc = cfs_err_setc(err, CFS_EDAMAGED, "%s is %zu bytes, too big for Zarr metadata", key,
                          len);
    if (rc > 0) {
        json_error_t je;
        j = json_loadb((const char *)data, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!j)
            rc = cfs_err_setc(err, CFS_EDAMAGED, "%s is not JSON (line %d: %s); re-write the "
                              "store with zarr or anndata", key, je.line, je.text);
        else
            *out = j;
    }
    free(data);
    free(key);
    return rc;
}

int zr_store_open(const char *path, zr_store **out, cfs_err *err)
{
    *out = NULL;
    zr_store *s = calloc(1, sizeof *s);
    if (!s || !(s->root = strdup(path))) {
        free(s);
        return cfs_err_oom(err);
    }
    if (!(s->real_root = realpath(path, NULL))) {
        int e = errno;
        zr_store_free(s);
        return cfs_err_setc(err, CFS_EIO, "cannot be resolved: %s", strerror(e));
    }
    json_t *zm;
    int rc = document(s, "", ".zmetadata", &zm, err);
    if (rc < 0) {
        zr_store_free(s);
        return -1;
    }
    if (rc > 0) {
        json_t *fmt = json_object_get(zm, "zarr_consolidated_format");
        json_t *meta = json_object_get(zm, "metadata");
        if (!json_is_integer(fmt) || json_integer_value(fmt) != 1 || !json_is_object(meta)) {
            json_decref(zm);
            zr_store_free(s);
            return cfs_err_setc(err, CFS_EDAMAGED, ".zmetadata is not consolidated metadata "
                                "(zarr_consolidated_format 1 with a metadata object); delete it "
                                "or re-consolidate the store (zarr.consolidate_metadata)");
        }
        s->meta = json_incref(meta);
        json_decref(zm);
    }
    *out = s;
    return 0;
}

void zr_store_free(zr_store *s)
{
    if (!s)
        return;
    json_decref(s->meta);
    free(s->root);
    free(s->real_root);
    free(s);
}

static bool has_doc(const zr_store *s, const char *rel, const char *leaf)
{
    char *key = cfs_path_join(rel, leaf);
    if (!key)
        return false;
    bool yes = s->meta && json_object_get(s->meta, key);
    char *path = NULL;
    cfs_err ignore;
    struct stat st;
    if (!yes && resolve(s, key, &path, &ignore) > 0)
        yes = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    free(path);
    free(key);
    return yes;
}

zr_kind zr_node_kind(const zr_store *s, const char *rel)
{
    if (has_doc(s, rel, ".zarray"))
        return ZR_ARRAY;
    if (has_doc(s, rel, ".zgroup"))
        return ZR_GROUP;
    return ZR_NONE;
}

int zr_attrs(const zr_store *s, const char *rel, json_t **out, cfs_err *err)
{
    int rc = document(s, rel, ".zattrs", out, err);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return (*out = json_object()) ? 0 : cfs_err_oom(err);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return cfs_err_setc(err, CFS_EDAMAGED, "%s%s.zattrs is not a JSON object", rel,
                            *rel ? "/" : "");
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

int zr_children(const zr_store *s, const char *rel, char ***names, size_t *n, cfs_err *err)
{
    *names = NULL;
    *n = 0;
    size_t cap = 0;
    size_t plen = strlen(rel);
    /* consolidated keys "<rel>/<child>/.zarray" or ".zgroup" */
    const char *key;
    json_t *v;
    if (s->meta)
        json_object_foreach(s->meta, key, v) {
            if (plen && (strncmp(key, rel, plen) != 0 || key[plen] != '/'))
                continue;
            const char *child = key + (plen ? plen + 1 : 0);
            const char *slash = strchr(child, '/');
            if (!slash || slash == child)
                continue;
            if (strcmp(slash, "/.zarray") != 0 && strcmp(slash, "/.zgroup") != 0)
                continue;
            if (push_name(names, n, &cap, child, (size_t)(slash - child)) < 0)
                goto oom;
        }
    /* and the folder's sub-folders that are nodes (keys .zmetadata does not list) */
    char *dir = NULL;
    int rc = resolve(s, rel, &dir, err);
    if (rc < 0) {
        zr_names_free(*names, *n);
        *names = NULL;
        *n = 0;
        return -1;
    }
    char **list = NULL;
    size_t nlist = 0;
    if (rc > 0 && cfs_path_list(dir, &list, &nlist) == 0) {
        for (size_t i = 0; i < nlist; i++) {
            char *crel = cfs_path_join(rel, list[i]);
            bool node = crel && zr_node_kind(s, crel) != ZR_NONE;
            free(crel);
            if (node && push_name(names, n, &cap, list[i], strlen(list[i])) < 0) {
                cfs_path_list_free(list, nlist);
                free(dir);
                goto oom;
            }
        }
        cfs_path_list_free(list, nlist);
    }
    free(dir);
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

int zr_meta_read(const zr_store *s, const char *rel, zr_meta *m, cfs_err *err)
{
    memset(m, 0, sizeof *m);
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
        rc = 0;
    for (int d = 0; rc == 0 && d < m->ndim; d++)
        if (m->chunks[d] == 0 && m->shape[d] > 0)
            rc = cfs_err_set(err, "its chunks are empty along axis %d", d);
    if (rc == 0) {
        m->fortran = order && strcmp(json_string_value(order), "F") == 0;
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
    free(m->fill_str);
    m->compressor = NULL;
    m->fill_str = NULL;
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

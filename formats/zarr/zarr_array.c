/*
 * Zarr v2 arrays read chunk by chunk (see zarr_array.h). A chunk is decoded with its
 * compressor, then (object arrays) split by numcodecs' vlen framing: a little-endian uint32
 * item count, then per item a uint32 byte length and the bytes (the framing src/zarr/vlen.c
 * writes; this is its read side). Edge chunks are stored at full chunk size.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "zarr_array.h"
#include "zarr_codecs.h"
#include "zarr_shard.h"
#include "path.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZR_MAX_CHUNK_BYTES ((uint64_t)1 << 31)

typedef unsigned long long ull;

typedef struct zr_arr {
    const zr_store *store;
    char *rel;
    zr_meta meta;
    uint64_t chunk_elems;
} zr_arr;

/* One decoded chunk. */
typedef struct chunk {
    unsigned char *data;   /* decoded bytes (NULL: missing, all fill) */
    size_t len;
    /* object arrays: each item's place in data */
    size_t *off;
    uint32_t *ilen;
} chunk;

static void chunk_clear(chunk *c)
{
    free(c->data);
    free(c->off);
    free(c->ilen);
    memset(c, 0, sizeof *c);
}

static uint32_t u32le(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int split_vlen(const zr_arr *a, chunk *c, const char *key, cfs_err *err)
{
    if (c->len < 4 || u32le(c->data) != a->chunk_elems)
        return cfs_err_setc(err, CFS_EDAMAGED, "chunk %s holds %s strings, but its chunk "
                            "shape has %llu; re-write the store", key,
                            c->len < 4 ? "no count of" : "another number of",
                            (ull)a->chunk_elems);
    size_t n = (size_t)a->chunk_elems;
    if (!(c->off = malloc((n ? n : 1) * sizeof *c->off)) ||
        !(c->ilen = malloc((n ? n : 1) * sizeof *c->ilen)))
        return cfs_err_oom(err);
    size_t at = 4;
    for (size_t i = 0; i < n; i++) {
        if (c->len - at < 4)
            return cfs_err_setc(err, CFS_EDAMAGED, "chunk %s is truncated (string %zu of %zu); "
                                "re-write the store", key, i, n);
        uint32_t l = u32le(c->data + at);
        at += 4;
        if (c->len - at < l)
            return cfs_err_setc(err, CFS_EDAMAGED, "chunk %s is truncated (string %zu of %zu); "
                                "re-write the store", key, i, n);
        /* the model's strings are C strings: a NUL would cut the value short unseen */
        if (memchr(c->data + at, 0, l))
            return cfs_err_setc(err, CFS_EREFUSED, "string %zu of chunk %s holds a NUL byte, "
                                "which a string of the store cannot carry", i, key);
        c->off[i] = at;
        c->ilen[i] = l;
        at += l;
    }
    return 0;
}

/* The key of the chunk (or shard) at cidx: v2 "0.1" or "0/1", v3 default "c/0/1". */
static void chunk_key(const zr_meta *m, const uint64_t *cidx, char *key, size_t cap)
{
    size_t at = 0;
    key[0] = '\0';
    if (m->key_prefix_c)
        at += (size_t)snprintf(key, cap, "c");
    for (int d = 0; d < m->ndim; d++)
        at += (size_t)snprintf(key + at, cap - at, "%s%llu",
                               d || m->key_prefix_c ? (m->sep == '/' ? "/" : ".") : "",
                               (ull)cidx[d]);
    if (m->ndim == 0 && !m->key_prefix_c)
        snprintf(key, cap, "0");
}

/* The inner chunk cidx's bytes inside its shard, whose whole value is read: 1 with them
 * (malloc'd), 0 when the shard or the inner chunk is missing, -1 with the reason. */
static int shard_slice(const zr_arr *a, const uint64_t *cidx, unsigned char **out, size_t *len,
                       char *key, size_t cap, cfs_err *err)
{
    const zr_meta *m = &a->meta;
    uint64_t sidx[CFS_MAX_DIMS], lin = 0, count = 1;
    for (int d = 0; d < m->ndim; d++) {
        uint64_t per = m->shard[d] / m->chunks[d];
        sidx[d] = cidx[d] / per;
        lin = lin * per + cidx[d] % per;
        count *= per;
    }
    chunk_key(m, sidx, key, cap);
    char *rel = cfs_path_join(a->rel, key);
    if (!rel)
        return cfs_err_oom(err);
    unsigned char *raw;
    size_t rawlen;
    int rc = zr_file_read(a->store, rel, &raw, &rawlen, err);
    free(rel);
    if (rc <= 0)
        return rc;
    uint64_t off = 0, nbytes = 0;
    rc = zr_shard_locate(raw, rawlen, count, lin, m->index_at_start, m->index_crc, &off,
                         &nbytes, err);
    if (rc <= 0) {
        free(raw);
        return rc < 0 ? cfs_err_prefix(err, "shard %s", key) : 0;
    }
    unsigned char *slice = malloc(nbytes ? (size_t)nbytes : 1);
    if (slice)
        memcpy(slice, raw + off, (size_t)nbytes);
    free(raw);
    if (!slice)
        return cfs_err_oom(err);
    *out = slice;
    *len = (size_t)nbytes;
    return 1;
}

static int chunk_load(const zr_arr *a, const uint64_t *cidx, chunk *c, cfs_err *err)
{
    memset(c, 0, sizeof *c);
    const zr_meta *m = &a->meta;
    char key[CFS_MAX_DIMS * 21 + 4];
    unsigned char *raw;
    size_t rawlen;
    int rc;
    if (m->sharded) {
        rc = shard_slice(a, cidx, &raw, &rawlen, key, sizeof key, err);
    } else {
        chunk_key(m, cidx, key, sizeof key);
        char *rel = cfs_path_join(a->rel, key);
        if (!rel)
            return cfs_err_oom(err);
        rc = zr_file_read(a->store, rel, &raw, &rawlen, err);
        free(rel);
    }
    if (rc <= 0)
        return rc; /* the message names the file */
    size_t expect = m->tkind == ZR_T_OBJECT ? 0 : (size_t)a->chunk_elems * m->itemsize;
    if (m->b2b) {
        if (zr_codec_decode3(m->b2b, raw, rawlen, expect, &c->data, &c->len, err) < 0)
            return cfs_err_prefix(err, "%s %s", m->sharded ? "an inner chunk of shard"
                                                           : "chunk", key);
    } else if (m->compressor) {
        rc = zr_codec_decode(m->compressor, raw, rawlen, expect, &c->data, &c->len, err);
        free(raw);
        if (rc < 0)
            return cfs_err_prefix(err, "chunk %s", key);
    } else {
        c->data = raw;
        c->len = rawlen;
    }
    if (m->tkind == ZR_T_OBJECT)
        rc = split_vlen(a, c, key, err);
    else if (c->len != expect)
        rc = cfs_err_setc(err, CFS_EDAMAGED, "chunk %s holds %zu bytes but its chunk shape "
                          "needs %zu (truncated?); re-write the store", key, c->len, expect);
    if (rc < 0)
        chunk_clear(c);
    return rc < 0 ? -1 : 1;
}

/* UTF-32 code points (trailing NULs dropped) as UTF-8. */
static char *utf32_to_utf8(const unsigned char *p, size_t width, bool big)
{
    size_t n = width / 4;
    uint32_t *cps = NULL;
    while (n > 0) {
        const unsigned char *q = p + (n - 1) * 4;
        uint32_t cp = big ? (uint32_t)q[3] | (uint32_t)q[2] << 8 | (uint32_t)q[1] << 16 |
                                (uint32_t)q[0] << 24
                          : u32le(q);
        if (cp != 0)
            break;
        n--;
    }
    (void)cps;
    char *out = malloc(n * 4 + 1);
    if (!out)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *q = p + i * 4;
        uint32_t cp = big ? (uint32_t)q[3] | (uint32_t)q[2] << 8 | (uint32_t)q[1] << 16 |
                                (uint32_t)q[0] << 24
                          : u32le(q);
        size_t w = cfs_utf8_put(out + k, cp);
        if (w == 0)
            w = cfs_utf8_put(out + k, 0xfffd);
        k += w;
    }
    out[k] = '\0';
    return out;
}

/* Element i of the chunk (or the fill when it is missing) into the read buffer at dst. */
static int put_elem(const zr_arr *a, const chunk *c, size_t i, unsigned char *dst)
{
    const zr_meta *m = &a->meta;
    if (m->dtype == CFS_STRING) {
        char *s;
        if (!c->data)
            s = strdup(m->fill_str ? m->fill_str : "");
        else if (m->tkind == ZR_T_OBJECT)
            s = cfs_text_to_utf8((const char *)c->data + c->off[i], c->ilen[i]);
        else if (m->tkind == ZR_T_UNICODE)
            s = utf32_to_utf8(c->data + i * m->itemsize, m->itemsize, m->big_endian);
        else {
            const char *p = (const char *)c->data + i * m->itemsize;
            size_t n = m->itemsize;
            while (n && p[n - 1] == '\0')
                n--;
            s = cfs_text_to_utf8(p, n);
        }
        memcpy(dst, &s, sizeof s);
        return s ? 0 : -1;
    }
    size_t size = m->itemsize;
    if (!c->data) {
        memcpy(dst, m->fill, size);
        return 0;
    }
    const unsigned char *src = c->data + i * size;
    if (m->tkind == ZR_T_BOOL)
        dst[0] = src[0] != 0;
    else if (m->big_endian)
        for (size_t k = 0; k < size; k++)
            dst[k] = src[size - 1 - k];
    else
        memcpy(dst, src, size);
    return 0;
}

/* Copies the part of chunk cidx inside the request into out. */
static int copy_chunk(const zr_arr *a, const chunk *c, const uint64_t *cidx,
                      const uint64_t *start, const uint64_t *count, unsigned char *out)
{
    const zr_meta *m = &a->meta;
    int nd = m->ndim;
    size_t esize = cfs_dtype_size(m->dtype);
    if (nd == 0)
        return put_elem(a, c, 0, out);
    uint64_t lo[CFS_MAX_DIMS], hi[CFS_MAX_DIMS], cstride[CFS_MAX_DIMS], ostride[CFS_MAX_DIMS];
    uint64_t s = 1, o = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ostride[d] = o;
        o *= count[d];
    }
    bool identity = true;
    for (int j = nd - 1; j >= 0; j--) { /* stored axis j is the array's axis perm[j] */
        int k = m->perm[j];
        identity &= k == j;
        cstride[k] = s;
        s *= m->chunks[k];
    }
    for (int d = 0; d < nd; d++) {
        uint64_t c0 = cidx[d] * m->chunks[d], c1 = c0 + m->chunks[d];
        lo[d] = start[d] > c0 ? start[d] : c0;
        hi[d] = start[d] + count[d] < c1 ? start[d] + count[d] : c1;
    }
    /* fast path: C order, plain little-endian numbers, a run along the last axis */
    bool runs = identity && c->data && m->dtype != CFS_STRING && m->tkind != ZR_T_BOOL &&
                (!m->big_endian || m->itemsize == 1);
    uint64_t idx[CFS_MAX_DIMS];
    memcpy(idx, lo, sizeof idx);
    uint64_t runlen = hi[nd - 1] - lo[nd - 1];
    for (;;) {
        uint64_t si = 0, oi = 0;
        for (int d = 0; d < nd; d++) {
            si += (idx[d] - cidx[d] * m->chunks[d]) * cstride[d];
            oi += (idx[d] - start[d]) * ostride[d];
        }
        if (runs) {
            memcpy(out + oi * esize, c->data + si * esize, (size_t)(runlen * esize));
        } else {
            for (uint64_t k = 0; k < runlen; k++)
                if (put_elem(a, c, (size_t)(si + k * cstride[nd - 1]),
                             out + (oi + k) * esize) < 0)
                    return -1;
        }
        int d = nd - 2;
        while (d >= 0 && ++idx[d] >= hi[d]) {
            idx[d] = lo[d];
            d--;
        }
        if (d < 0)
            break;
    }
    return 0;
}

static int zr_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count, void *out,
                   cfs_err *err)
{
    const zr_arr *a = arr->ctx;
    const zr_meta *m = &a->meta;
    int nd = m->ndim;
    uint64_t total = 1;
    for (int d = 0; d < nd; d++) {
        if (start[d] + count[d] > m->shape[d] || start[d] + count[d] < start[d])
            return cfs_err_set(err, "a read beyond the array's shape");
        total *= count[d];
    }
    if (total == 0)
        return 0;
    size_t esize = cfs_dtype_size(m->dtype);
    if (m->dtype == CFS_STRING)
        memset(out, 0, (size_t)total * esize);
    uint64_t c0[CFS_MAX_DIMS], c1[CFS_MAX_DIMS], ci[CFS_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        c0[d] = start[d] / m->chunks[d];
        c1[d] = (start[d] + count[d] - 1) / m->chunks[d];
        ci[d] = c0[d];
    }
    int rc = 0;
    for (;;) {
        chunk c;
        rc = chunk_load(a, ci, &c, err);
        if (rc < 0) {
            cfs_err_prefix(err, "%s", a->rel); /* the array whose chunk it is */
            break;
        }
        rc = copy_chunk(a, &c, ci, start, count, out);
        chunk_clear(&c);
        if (rc < 0) {
            rc = cfs_err_oom(err);
            break;
        }
        int d = nd - 1;
        while (d >= 0 && ++ci[d] > c1[d]) {
            ci[d] = c0[d];
            d--;
        }
        if (d < 0)
            break;
    }
    if (rc < 0) {
        if (m->dtype == CFS_STRING) {
            cfs_strings_free(out, (size_t)total);
            memset(out, 0, (size_t)total * esize);
        }
        return -1;
    }
    return 0;
}

static void zr_free(void *ctx)
{
    zr_arr *a = ctx;
    if (!a)
        return;
    zr_meta_clear(&a->meta);
    free(a->rel);
    free(a);
}

static const cfs_array_ops zr_ops = {zr_read, zr_free, NULL, NULL, NULL};

int zr_array_open(const zr_store *s, const char *rel, cfs_array **out, cfs_err *err)
{
    *out = NULL;
    zr_arr *a = calloc(1, sizeof *a);
    if (!a || !(a->rel = strdup(rel))) {
        free(a);
        return cfs_err_oom(err);
    }
    a->store = s;
    if (zr_meta_read(s, rel, &a->meta, err) < 0) {
        free(a->rel);
        free(a);
        return -1;
    }
    uint64_t n = 1;
    for (int d = 0; d < a->meta.ndim; d++) {
        uint64_t c = a->meta.chunks[d] ? a->meta.chunks[d] : 1;
        a->meta.chunks[d] = c;
        if (c > ZR_MAX_CHUNK_BYTES || (n *= c) > ZR_MAX_CHUNK_BYTES)
            break;
    }
    a->chunk_elems = n;
    size_t isz = a->meta.itemsize ? a->meta.itemsize : 8;
    if (n > ZR_MAX_CHUNK_BYTES / isz) {
        zr_free(a);
        return cfs_err_set(err, "its chunks hold more than %llu bytes each, more than this "
                           "reader accepts; re-chunk it", (ull)ZR_MAX_CHUNK_BYTES);
    }
    cfs_array *arr = cfs_array_new(a->meta.dtype, a->meta.ndim, a->meta.shape, &zr_ops, a);
    if (!arr) {
        zr_free(a);
        return cfs_err_oom(err);
    }
    *out = arr;
    return 0;
}

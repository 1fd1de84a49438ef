#include "elems.h"

#include <stdlib.h>
#include <string.h>

void *cfs_elems_alloc(uint64_t n, size_t size, cfs_err *err)
{
    size_t bytes;
    if (n > SIZE_MAX || __builtin_mul_overflow((size_t)n, size, &bytes)) {
        cfs_err_set(err, "a buffer of %llu elements is too large", (unsigned long long)n);
        return NULL;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        cfs_err_setc(err, CFS_ENOMEM, "out of memory (%zu bytes)", bytes);
    return p;
}

uint64_t cfs_elems_int(const void *buf, cfs_dtype t, size_t i, bool *neg)
{
    const unsigned char *p = buf;
    int64_t s = 0;
    *neg = false;
    switch (t) {
    case CFS_INT8: { int8_t v; memcpy(&v, p + i, 1); s = v; break; }
    case CFS_INT16: { int16_t v; memcpy(&v, p + 2 * i, 2); s = v; break; }
    case CFS_INT32: { int32_t v; memcpy(&v, p + 4 * i, 4); s = v; break; }
    case CFS_INT64: { int64_t v; memcpy(&v, p + 8 * i, 8); s = v; break; }
    case CFS_BOOL:
    case CFS_UINT8: return p[i];
    case CFS_UINT16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case CFS_UINT32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case CFS_UINT64: { uint64_t v; memcpy(&v, p + 8 * i, 8); return v; }
    default: return 0;
    }
    if (s < 0) {
        *neg = true;
        return (uint64_t)0 - (uint64_t)s;
    }
    return (uint64_t)s;
}

#define TILE 32

#define TRANSPOSE_AS(type)                                                                    \
    do {                                                                                      \
        const type *s_ = (const type *)src;                                                   \
        type *d_ = (type *)dst;                                                               \
        for (uint64_t r0 = 0; r0 < rows; r0 += TILE)                                          \
            for (uint64_t c0 = 0; c0 < cols; c0 += TILE) {                                    \
                uint64_t r1 = r0 + TILE < rows ? r0 + TILE : rows;                            \
                uint64_t c1 = c0 + TILE < cols ? c0 + TILE : cols;                            \
                for (uint64_t r = r0; r < r1; r++)                                            \
                    for (uint64_t c = c0; c < c1; c++)                                        \
                        d_[c * rows + r] = s_[r * cols + c];                                  \
            }                                                                                 \
    } while (0)

void cfs_elems_transpose(const void *src, void *dst, uint64_t rows, uint64_t cols, size_t es)
{
    switch (es) {
    case 1: TRANSPOSE_AS(uint8_t); return;
    case 2: TRANSPOSE_AS(uint16_t); return;
    case 4: TRANSPOSE_AS(uint32_t); return;
    case 8: TRANSPOSE_AS(uint64_t); return;
    default:
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t c = 0; c < cols; c++)
                memcpy((char *)dst + (c * rows + r) * es, (const char *)src + (r * cols + c) * es,
                       es);
    }
}

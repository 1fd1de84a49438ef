/* Buffers of model elements, as the loom reader and its array views handle them: allocated with
 * an overflow check, integers read back whatever their dtype, C-order blocks transposed. */
#ifndef CFS_ELEMS_H
#define CFS_ELEMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* malloc of n elements of size bytes (at least 1 byte), or NULL with err ("too large" when
 * n * size overflows, else out of memory). */
void *cfs_elems_alloc(uint64_t n, size_t size, cfs_err *err);
/* Element i of an integer (or bool) buffer; *neg is set for a negative value (then the result
 * is its magnitude). Buffers are little-endian, as the host is. 0 for other dtypes. */
uint64_t cfs_elems_int(const void *buf, cfs_dtype t, size_t i, bool *neg);
/* src is rows x cols elements of es bytes in C order; dst receives cols x rows. */
void cfs_elems_transpose(const void *src, void *dst, uint64_t rows, uint64_t cols, size_t es);

#endif

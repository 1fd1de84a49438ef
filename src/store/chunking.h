/* Chunk shapes (docs/design.md §4, Chunks): along the first axis, 0.25-8 MiB decoded, never more
 * than 100 000 chunks per array; a row too wide for one chunk is split along its second axis.
 * The cells of a priority-ordered store are cut on the priority levels instead. */
#ifndef CFS_CHUNKING_H
#define CFS_CHUNKING_H

#include <stddef.h>
#include <stdint.h>

#define CFS_CHUNK_TARGET_BYTES (4u << 20)
#define CFS_CHUNK_WHOLE_BYTES (8u << 20)
#define CFS_CHUNK_MAX_COUNT 100000u
/* Strings have no size in metadata: chunking assumes this many bytes per element. */
#define CFS_STRING_BYTES_ESTIMATE 16u

/* Fills chunks[0..ndim) for an array of the given shape and decoded element size. level_rows
 * (the model's cfs_array.level_rows, 0 for none): the first axis holds cells in priority order
 * and the levels from level_rows on are its multiples; then the rows of a chunk divide
 * level_rows (as many as fit 8 MiB), so every such level ends on a chunk boundary. */
void cfs_chunk_shape(int ndim, const uint64_t *shape, size_t elem_bytes, uint64_t level_rows,
                     uint64_t *chunks);
/* Number of chunks along each dimension and in total. */
uint64_t cfs_chunk_grid(int ndim, const uint64_t *shape, const uint64_t *chunks, uint64_t *grid);
/* Grid coordinates of linear index idx. */
void cfs_chunk_coords(int ndim, const uint64_t *grid, uint64_t idx, uint64_t *coords);

#endif

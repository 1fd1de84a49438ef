/*
 * The byte source of R's serialization format (R's src/main/serialize.c; notes in
 * input-formats.md §8.1-8.3): a file or a memory buffer, read plain or through gzip, bzip2 or
 * xz, detected by magic, layer after layer (a .rds.gz of a gzip-compressed .rds is two gzip
 * layers), then the .rda/.RData container magic ("RDX3\n", "RDA2\n", "RDB3\n", ...) if there is
 * one, and the stream header: format ("X\n" XDR big-endian binary, "A\n" ASCII, "B\n" native
 * little-endian binary), version (2 or 3), the writer's R version, the oldest reader's, and for
 * version 3 the writer's native encoding.
 *
 * Reading is sequential only (the stream may be compressed) with a small look-ahead; the
 * primitives below decode ints, doubles, raw bytes and string bytes in whichever of the three
 * formats the header named, in bulk. Every failure is one line in err: CFS_EDAMAGED for bytes
 * that contradict the format (saying what and at which byte of the decompressed stream),
 * CFS_EREFUSED for a file that is not an R stream or a version not read, CFS_EIO for a read
 * error. The object reader (robject.h) adds which item it was reading.
 */
#ifndef CFS_RSTREAM_H
#define CFS_RSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef enum r_format {
    R_FORMAT_XDR = 'X',    /* big-endian binary: what saveRDS and save write */
    R_FORMAT_ASCII = 'A',  /* saveRDS(ascii = TRUE): whitespace-separated tokens */
    R_FORMAT_NATIVE = 'B'  /* serialize(xdr = FALSE): host order, read as little-endian */
} r_format;

/* At most this many compression layers are peeled (gzip of gzip is two). */
#define R_STREAM_MAX_LAYERS 3

typedef struct r_header {
    bool workspace;            /* an .rda/.RData: the container magic came first */
    r_format format;
    int version;               /* 2 or 3 */
    uint32_t writer_version;   /* R version packed as major*65536 + minor*256 + patch */
    uint32_t min_reader_version;
    char encoding[64];         /* version 3: the writer's native encoding ("UTF-8"); else "" */
    int layers;                /* compression layers peeled, outermost first in codec[] */
    const char *codec[R_STREAM_MAX_LAYERS]; /* "gzip", "bzip2", "xz" */
} r_header;

typedef struct r_stream r_stream;

/* Opens path, peels its compression layers and reads the container magic and the stream header
 * (into *hdr); the stream is left at the first item. */
int r_stream_open(const char *path, r_stream **out, r_header *hdr, cfs_err *err);
/* The same over an open file, read from its current offset (0 expected); takes fd. */
int r_stream_open_fd(int fd, r_stream **out, r_header *hdr, cfs_err *err);
/* The same over len bytes at data (not copied: they must outlive the stream). */
int r_stream_open_mem(const void *data, size_t len, r_stream **out, r_header *hdr, cfs_err *err);
void r_stream_close(r_stream *s);

/* Bytes of the decompressed stream consumed so far (counted from the container magic, or the
 * format bytes when there is none). */
uint64_t r_stream_offset(const r_stream *s);
/* For an uncompressed binary stream read from a file: the file offset of the next byte, and the
 * bytes left in the file; -1 / UINT64_MAX otherwise (compressed, ASCII or memory streams). Large
 * vectors of such files are read in place (formats/r/rvectors.h). */
int64_t r_stream_file_offset(const r_stream *s);
uint64_t r_stream_bytes_left(const r_stream *s);

/* One 32-bit integer; ASCII "NA" is INT32_MIN. */
int r_stream_int(r_stream *s, int32_t *v, cfs_err *err);
/* n integers into v, in host order. */
int r_stream_ints(r_stream *s, int32_t *v, size_t n, cfs_err *err);
/* n doubles into v, in host order; ASCII NA, NaN, Inf, -Inf and C99 hex floats. */
int r_stream_doubles(r_stream *s, double *v, size_t n, cfs_err *err);
/* n raw bytes (ASCII: one hex token each). */
int r_stream_raw(r_stream *s, uint8_t *v, size_t n, cfs_err *err);
/* n bytes of a string (a CHARSXP's or a builtin's name): as is in the binary formats; ASCII: one
 * token with R's C-style escapes, exactly n bytes once decoded. */
int r_stream_string(r_stream *s, char *v, size_t n, cfs_err *err);

#endif

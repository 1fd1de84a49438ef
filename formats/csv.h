/*
 * Small text-table helpers for the readers of text formats (Cell Ranger's MatrixMarket folders,
 * their .tsv lists and analysis/ CSVs): a line reader over plain or gzip-compressed files
 * (zlib's gz* functions read both), a CSV field splitter, and a walk over keyed CSV tables.
 */
#ifndef CFS_CSV_H
#define CFS_CSV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "strset.h"

/* Longest line accepted: a longer one is an error (a binary file, not a text table). */
#define CFS_TEXT_MAX_LINE ((size_t)1 << 20)

typedef struct cfs_text cfs_text;

/* Opens path for reading lines; label names the file in messages (e.g. "outs/matrix.mtx.gz").
 * -1 with a reason (naming label) if it cannot be opened. */
int cfs_text_open(const char *path, const char *label, cfs_text **out, cfs_err *err);

/*
 * The next line, without its end ("\n" or "\r\n"), NUL-terminated and writable, valid until the
 * next call. Returns 1 for a line, 0 at the end of the file, -1 with a reason naming the file and
 * the line (a truncated or corrupt gzip stream, a read error, a NUL byte, a line longer than
 * CFS_TEXT_MAX_LINE).
 */
int cfs_text_line(cfs_text *t, char **line, size_t *len, cfs_err *err);

/* Whether the line last returned ended with a newline: a file whose last line does not may
 * have been cut short in that line. */
bool cfs_text_terminated(const cfs_text *t);

/* 1-based number of the line last returned (0 before the first). */
uint64_t cfs_text_lineno(const cfs_text *t);

/* True if the file is gzip-compressed. */
bool cfs_text_gzipped(const cfs_text *t);

/* Back to the first line. */
int cfs_text_rewind(cfs_text *t, cfs_err *err);

const char *cfs_text_label(const cfs_text *t);

void cfs_text_close(cfs_text *t);

/*
 * Splits line in place at sep into fields: a field may be "quoted" (with "" for a quote and sep
 * inside). At most max field pointers are stored; the return value is the number of fields
 * (which may exceed max), or -1 if a quote is not closed or is followed by something other than
 * sep.
 */
long cfs_csv_split(char *line, char sep, char **fields, size_t max);

/*
 * One walk over a CSV whose first column is a key naming a row of a table (Cell Ranger's
 * analysis/ CSVs: a barcode of the matrix): its header line, then every data line in order.
 * Blank lines are skipped. The walk stops with a reason (malloc'd, starting with label) at an
 * empty file, a last line without a line end, an unclosed quote, a line whose field count is not
 * the header's, or a key listed twice; after the walk, keys the table lacks (counted, the first
 * named) and a file listing no row are reasons too. A CSV with a reason is to be left out whole.
 */
typedef struct cfs_csv_walk {
    const char *path, *label;
    const cfs_strset *keys;    /* key -> row */
    uint64_t nrows;            /* every row < nrows */
    unsigned char *seen;       /* nrows zeroed bytes: the walk sets those of the rows listed */
    /* The header's n fields (n is -1 for an unclosed quote): 0 to read the data lines, with
     * *nfields their field count (the key included); 1 if it is not the header the caller
     * reads, with *why; -1 on allocation failure. */
    int (*header)(void *ctx, char **fields, long n, long *nfields, char **why);
    /* A data line's fields, for row (line: its 1-based number): 0 to go on, 1 to stop with
     * *why, -1 on allocation failure. */
    int (*row)(void *ctx, uint64_t row, uint64_t line, char **fields, char **why);
    void *ctx;
} cfs_csv_walk;

/* 0 with *why NULL (every line read) or the reason; -1 on allocation failure. */
int cfs_csv_walk_run(const cfs_csv_walk *w, char **why);

#endif

/*
 * Small text-table helpers for the readers of text formats (Cell Ranger's MatrixMarket folders,
 * their .tsv lists and analysis/ CSVs): a line reader over plain or gzip-compressed files
 * (zlib's gz* functions read both), and a CSV field splitter.
 */
#ifndef CFS_CSV_H
#define CFS_CSV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

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

#endif

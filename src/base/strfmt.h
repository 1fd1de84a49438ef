/* Strings made printf-style, for messages and names built from parts. */
#ifndef CFS_STRFMT_H
#define CFS_STRFMT_H

#include <stdio.h>

/* A malloc'd string formatted as printf would print it; NULL on allocation failure. */
char *cfs_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Writes "cellucid-fs: " and the text formatted as printf would to log (NULL: nowhere) as one
 * line, shown as cfs_text_shown shows text: a name or a reason taken from an input cannot break
 * the line or forge another. */
void cfs_log(FILE *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

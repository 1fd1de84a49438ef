/* Strings made printf-style, for messages and names built from parts. */
#ifndef CFS_STRFMT_H
#define CFS_STRFMT_H

/* A malloc'd string formatted as printf would print it; NULL on allocation failure. */
char *cfs_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

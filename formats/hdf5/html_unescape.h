/* Unescaping the XML / HTML character references in loom strings, as Python's html.unescape
 * (which loompy applies to every string it reads) does. */
#ifndef CFS_HTML_UNESCAPE_H
#define CFS_HTML_UNESCAPE_H

#include <stddef.h>

#include "model.h"

/* A malloc'd unescaped copy of s, or NULL on allocation failure. */
char *cfs_html_unescape(const char *s);
/* Unescapes n malloc'd strings in place; on allocation failure frees them all (and sets err). */
int cfs_html_unescape_all(char **s, size_t n, cfs_err *err);

#endif

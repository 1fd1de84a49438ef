/* Cellucid's rule for text (a dataset's name, uns['cellucid'] strings): no white space at either
 * end and no character without a glyph (a control or zero-width character); a store whose
 * uns['cellucid'] breaks it is refused by Cellucid. */
#ifndef CFS_CELLUCID_TEXT_H
#define CFS_CELLUCID_TEXT_H

#include <stdbool.h>

/* Whether s is valid UTF-8 text by the rule (the empty text only if may_be_empty). */
bool cfs_cellucid_text_ok(const char *s, bool may_be_empty);
/* Text by the rule made of any bytes (a file's name): read as UTF-8, else Latin-1; each
 * character without a glyph a space, spaces at the ends dropped. A malloc'd copy; NULL when
 * nothing is left, or out of memory. */
char *cfs_cellucid_text_from(const char *s);

#endif

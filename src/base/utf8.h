/* UTF-8 validation and decoding, shared by the readers (which re-encode foreign text) and the
 * renderer (which frames or widens it). */
#ifndef CFS_UTF8_H
#define CFS_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Decodes the sequence at s (at most n > 0 bytes) into *cp and returns its length, or 0 if it
 * is not valid UTF-8: overlong forms, surrogates and code points beyond U+10FFFF are rejected,
 * as Python's decoder rejects them.
 */
size_t cfs_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* True if all n bytes at s are valid UTF-8 as cfs_utf8_decode defines it. */
bool cfs_utf8_valid(const unsigned char *s, size_t n);

#endif

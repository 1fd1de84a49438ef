/* UTF-8 validation, decoding and encoding, shared by the readers (which re-encode foreign text)
 * and the renderer (which frames or widens it); and the one policy for text of unknown
 * encoding, HDF5 names and strings alike and text files: valid UTF-8 is UTF-8, anything else
 * was Latin-1 (the only single-byte encoding every byte of which is a character). */
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

/* Writes cp (at most U+10FFFF, not a surrogate) as 1-4 bytes at out; returns how many, or 0
 * for a value that is not a Unicode scalar value. */
size_t cfs_utf8_put(char *out, uint32_t cp);
/* A NUL-terminated, malloc'd UTF-8 copy of the len bytes at s: the bytes themselves when they
 * are valid UTF-8, else each byte taken as Latin-1. NULL on allocation failure. */
char *cfs_text_to_utf8(const char *s, size_t len);

/* Text of any bytes as a log line or status.json shows it to people: valid UTF-8 as it is, but
 * each control character (C0, DEL, C1) and each byte that is not UTF-8 written as \xHH, so a
 * file's name or a damaged element's cannot break a line, forge one, or move a terminal's
 * cursor. A malloc'd copy; NULL when out of memory. */
char *cfs_text_shown(const char *s);

#endif

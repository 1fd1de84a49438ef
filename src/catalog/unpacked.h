/* Decompressed copies of compressed inputs, written whole or not at all: what the front ends'
 * unpackers (cfs_unpacker in options.h) share. */
#ifndef CFS_UNPACKED_H
#define CFS_UNPACKED_H

#include <stdint.h>

#include "error.h"
#include "progress.h"

/* What a writer is told as the copy grows; non-zero (with err set) stops it. */
typedef int (*cfs_unpacked_grow)(void *ctx, uint64_t written, cfs_err *err);

/* Decompresses source (compressed with codec) into dest, and again while what comes out is
 * itself compressed (up to 3 layers: a .rds.gz of a gzip-compressed .rds): into a temporary
 * name beside it, then renamed, so dest is only ever a whole copy. progress (may be NULL) shows "decompressing";
 * grow (may be NULL) hears the bytes written so far (to count them against a bound). A URL
 * source (cfs_is_url) is fetched whole first ("fetching", counted by grow too), then
 * decompressed while what came is compressed (codec unused; none compressed: the plain copy). */
int cfs_unpacked_write(const char *source, const char *codec, const char *dest,
                       cfs_progress *progress, cfs_unpacked_grow grow, void *grow_ctx,
                       cfs_err *err);

/* A URL fetched with the files beside it (cfs_url_members: a MatrixMarket matrix and its lists,
 * §11) is written as a folder dest holding them, each under its name, as they are (nothing
 * decompressed: its reader reads them so). */

/* The path to open of the copy of source at dest: dest, or the object's own file in the folder
 * dest of a URL fetched with the files beside it; malloc'd, NULL when out of memory. */
char *cfs_unpacked_opened(const char *source, const char *dest);
/* The bytes of the copy at dest (a file, or the files of a folder); -1 if it is not there. */
int cfs_unpacked_bytes(const char *dest, uint64_t *bytes);
/* Deletes the copy at dest (a file, or a folder of files). */
void cfs_unpacked_remove(const char *dest);

/* An unpacker (cfs_unpacker) writing copies into the folder ctx (a char *, which must exist
 * and outlive the copies), each under a fresh name: export's work folder, inspect's. */
int cfs_unpacked_in_folder(void *ctx, const char *source, const char *codec,
                           cfs_progress *progress, char **path, cfs_err *err);

#endif

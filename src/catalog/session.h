/*
 * A dataset's published view (docs/design.md §5): a Cellucid session file beside its source,
 * named as the dataset is named (its stem, cfs_source_part_stem): pbmc.h5ad and pbmc.h5ad.gz
 * have pbmc.cellucid-session, a run folder run1/outs/ has run1.cellucid-session beside run1/,
 * object o of an R workspace x.RData of several datasets has x-o.cellucid-session. It is read
 * once: datasets.json lists the length and SHA-256 of the bytes read, and the front end serves
 * those very bytes as <id>.cellucid-session beside the store, never the file read again.
 */
#ifndef CFS_SESSION_H
#define CFS_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

#include "digest.h"
#include "error.h"
#include "prepare.h"

#define CFS_SESSION_SUFFIX ".cellucid-session"
/* A published view is a few KiB (Cellucid publishes at most 32 KiB); more is not a view. */
#define CFS_SESSION_MAX_BYTES (64u << 20)

typedef struct cfs_session {
    char *file;                 /* the file found beside the source; NULL: none */
    bool whole_input;           /* file is named after an input of several datasets */
    struct stat version;        /* device, inode, size and mtime of file when found */
    unsigned char *bytes;       /* what was read, listed and served; NULL: not listed */
    size_t len;
    char sha256[CFS_SHA256_HEX];        /* lowercase hex of bytes */
    char *refused;              /* why file is not listed: one line without its name */
} cfs_session;

/* Whether a file so named is a session file: never an input of its own. */
bool cfs_session_file_name(const char *name);

/* The name a dataset's view is served and listed under, beside its store (caller frees). Ids
 * use only URL-unreserved characters, so it is its own canonical URL encoding. */
char *cfs_session_served_name(const char *id);

/*
 * Looks for the session of the dataset (source, part; part NULL for an input of one): sets
 * out->file, whole_input and version only, out being empty. folder is the source folder a
 * front end was given (where a NAME.url source's view lies, and which a symlink must not lead
 * out of), NULL for a single input. Nothing found is not an error; -1 only when out of memory.
 */
int cfs_session_look(const char *folder, const char *source, const char *part, cfs_session *out,
                     cfs_err *err);
/* Whether now (cfs_session_look) found another file, or another version of it, than held. */
bool cfs_session_moved(const cfs_session *held, const cfs_session *now);
/*
 * Takes in what cfs_session_look found: its bytes and digest, read once, or why it is not
 * listed. not_listed says why the dataset itself is not in datasets.json (NULL: it is): the
 * file is then not read. -1 with CFS_ERETRY when the file changed while it was read (being
 * written: ask again later), or when out of memory.
 */
int cfs_session_take(cfs_session *s, const char *folder, const char *not_listed, cfs_err *err);
/* Why the dataset of p is not in datasets.json (so its view is not read), or NULL if it is. */
const char *cfs_session_unlisted(const cfs_prepared *p);
/* Why b[0..n) is not a Cellucid session file (filled into why), or NULL when it is one. */
const char *cfs_session_format_problem(const unsigned char *b, size_t n, char *why, size_t len);
/* The one-line report of a session found and not listed (nothing otherwise), naming its file
 * as shown (NULL: its path). */
void cfs_session_report(const cfs_session *s, const char *shown, FILE *log);
void cfs_session_clear(cfs_session *s);

#endif

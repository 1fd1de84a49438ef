/*
 * Sources that are URLs (docs/design.md §11): the names a source may have that are not paths,
 * and the one way every layer reads them. The reading itself is set once per process by its
 * front end (the daemon: src/net over libcurl; a reader worker: requests to its daemon), so the
 * layers below never depend on a network library.
 */
#ifndef CFS_REMOTE_H
#define CFS_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "error.h"

/* What a server says of an object: its size and its version (the ETag, else Last-Modified and
 * the size), which every read of it must find again. */
typedef struct cfs_remote_info {
    uint64_t size;
    int64_t mtime;              /* Last-Modified (seconds), 0 when not given */
    char version[256];
} cfs_remote_info;

typedef struct cfs_remote_ops {
    /* What url is now (a recent answer may be reused: §11 polling). */
    int (*info)(void *ctx, const char *url, cfs_remote_info *out, cfs_err *err);
    /* Exactly len bytes at off of the version of url that was (never short, never another
     * version's: a changed object fails the read). */
    int (*read)(void *ctx, const char *url, const cfs_remote_info *version, uint64_t off,
                void *buf, size_t len, cfs_err *err);
    void *ctx;
    /* As read, but written to fd at off, past any kept blocks: an object fetched whole into a
     * file (§11) is not kept twice. NULL: not here (a reader worker). */
    int (*fetch)(void *ctx, const char *url, const cfs_remote_info *version, uint64_t off,
                 size_t len, int fd, cfs_err *err);
} cfs_remote_ops;

/* Bytes per block of a remote object: what is fetched and kept at a time (the daemon keeps
 * blocks in its cache, a reader worker a few of them in memory). */
#define CFS_REMOTE_BLOCK ((uint64_t)1 << 20)

/* Whether a source name is a URL this program reads (http://, https://, s3://). */
bool cfs_is_url(const char *name);

/* Whether a URL names a folder read key by key (its path ends with "/" or ".zarr": a Zarr
 * store, §11) rather than one object read by ranges. */
bool cfs_url_is_folder(const char *url);
/* The URL of key under the folder URL (without its "#..." part); malloc'd, NULL when out of
 * memory. */
char *cfs_url_child(const char *folder, const char *key);
/* Whether url is source, or a key under the folder URL source (cfs_url_child's, with no "." or
 * ".." component, no "?" or "#"): what a reader of source may ask for. */
bool cfs_url_within(const char *url, const char *source);

/* Sets this process's reader of URLs (the ops are copied). Without one, URLs are refused. */
void cfs_remote_set_ops(const cfs_remote_ops *ops);

int cfs_remote_info_of(const char *url, cfs_remote_info *out, cfs_err *err);
int cfs_remote_read(const char *url, const cfs_remote_info *version, uint64_t off, void *buf,
                    size_t len, cfs_err *err);

/* Writes the whole of the version of url into fd (from its offset 0), in pieces, telling
 * grow (may be NULL; non-zero stops it) the bytes written so far. */
typedef int (*cfs_remote_grow)(void *ctx, uint64_t written, uint64_t total, cfs_err *err);
int cfs_remote_fetch(const char *url, const cfs_remote_info *version, int fd,
                     cfs_remote_grow grow, void *grow_ctx, cfs_err *err);

/* Whether a read of a URL failed on this thread since the last clear for a reason that may pass
 * (the server unreachable, a broken transfer, the object changed under the read): a reader
 * whose library hides the cause (libhdf5) says so rather than "damaged" (CFS_ERETRY). */
void cfs_remote_failures_clear(void);
bool cfs_remote_failed(void);

/* stat(2) for a source name: a URL's version as a file's (device 0, an inode from its version,
 * its size and Last-Modified, a regular file; a folder URL's, its consolidated metadata's as a
 * folder's: .zmetadata, else (Zarr v3) the root's zarr.json), so that whatever compares versions of local
 * files compares remote ones alike. -1 with errno set (EIO for a URL that cannot be asked). */
int cfs_source_stat(const char *name, struct stat *st);

/* The name a URL gives its dataset: the part after "#" (a NAME.url file's NAME, §11), else the
 * last component of its path; malloc'd, NULL when out of memory. */
char *cfs_url_name(const char *url);
/* url without its "#..." part (what is sent); malloc'd. */
char *cfs_url_target(const char *url);

#endif

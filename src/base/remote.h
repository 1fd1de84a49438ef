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
#include "strlist.h"

/* What a server says of an object: its size and its version (the ETag, else Last-Modified and
 * the size), which every read of it must find again. */
typedef struct cfs_remote_info {
    uint64_t size;
    int64_t mtime;              /* Last-Modified (seconds), 0 when not given */
    char version[256];
} cfs_remote_info;

/* Whether the server has key (a name beside the object, or in the folder, a companions hook
 * asks of): 1 yes, 0 no (404/410), -1 with the reason (naming the key's URL). */
typedef int (*cfs_url_exists)(void *ctx, const char *key, cfs_err *err);

/* What base is told of the files of URL sources, by the formats through the front end's reader
 * of URLs (docs/design.md §2.1, §11: base names no format's files). */
typedef struct cfs_url_shapes {
    /* Name endings (any case) of URLs that are folders read key by key (a Zarr store's); a URL
     * whose path ends in "/" is a folder too. NULL-terminated, or NULL. */
    const char *const *folder_suffixes;
    /* Keys of such a folder, tried in order, whose version is the folder's (its consolidated
     * metadata). NULL-terminated, or NULL. */
    const char *const *folder_version_keys;
    /* Optional: the inputs fetched whole with the files beside them into one folder (a
     * MatrixMarket matrix and its lists). name is the object's (the last component of its
     * URL's path) or NULL for a folder URL; appends to out the keys (beside the object, in the
     * folder) its reader would read there, asking exists which the server has. 1: such an
     * input (the object itself is not listed); 0: not one; -1 with the reason (a list it
     * cannot do without, or a failure of exists). */
    int (*companions)(const char *name, cfs_url_exists exists, void *ctx, cfs_strlist *out,
                      cfs_err *err);
} cfs_url_shapes;

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
    /* The formats' names of things (may be NULL: no folder URLs but "/", no companions); must
     * outlive its use. */
    const cfs_url_shapes *shapes;
} cfs_remote_ops;

/* Bytes per block of a remote object: what is fetched and kept at a time (the daemon keeps
 * blocks in its cache, a reader worker a few of them in memory). */
#define CFS_REMOTE_BLOCK ((uint64_t)1 << 20)

/* Whether a source name is a URL this program reads (http://, https://, s3://). */
bool cfs_is_url(const char *name);

/* Whether a URL names a folder read key by key (its path ends with "/" or a folder suffix of
 * the shapes: a Zarr store, §11) rather than one object read by ranges. */
bool cfs_url_is_folder(const char *url);
/* The URL of key under the folder URL (without its "#..." part); malloc'd, NULL when out of
 * memory. */
char *cfs_url_child(const char *folder, const char *key);
/* The URL of key beside the object at url (in the folder holding it; a folder URL: in it);
 * malloc'd, NULL when out of memory. */
char *cfs_url_sibling(const char *url, const char *key);
/* The last component of url's path (no "?..." or "#..."); malloc'd. */
char *cfs_url_leaf(const char *url);

/* A URL source fetched whole with the files beside it (cfs_url_shapes.companions, §11). */
typedef struct cfs_url_member {
    char *key;                  /* its name in the folder of the copy */
    char *url;
    cfs_remote_info info;
} cfs_url_member;
/* The files of such a source, each with what it is now: an object's own first, then its
 * companions the server has (a 404 skips one); a folder URL's, when none of its folder version
 * keys answers. 1 with them in *out (cfs_url_members_free), 0 when url is no such source,
 * -1 with the reason (naming the URL that failed, or what could not be found). */
int cfs_url_members(const char *url, cfs_url_member **out, size_t *n, cfs_err *err);
void cfs_url_members_free(cfs_url_member *m, size_t n);
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
 * its size and Last-Modified, a regular file; a folder URL's, that of the first of its folder
 * version keys the server has, as a folder's; one fetched with companions, made of all its
 * members' versions), so that whatever compares versions of local files compares remote ones
 * alike. -1 with errno set (EIO for a URL that cannot be asked). */
int cfs_source_stat(const char *name, struct stat *st);
/* Whether two such stats are one version of a source: device, inode, size and mtime. */
bool cfs_same_version(const struct stat *a, const struct stat *b);

/* The name a URL gives its dataset: the part after "#" (a NAME.url file's NAME, §11), else the
 * last component of its path; malloc'd, NULL when out of memory. */
char *cfs_url_name(const char *url);
/* url without its "#..." part (what is sent); malloc'd. */
char *cfs_url_target(const char *url);

#endif

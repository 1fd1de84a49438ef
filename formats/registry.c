/*
 * The format table and content detection. Formats bid on what they read of an input through
 * its probe input; the name never decides. What depends on which formats exist is derived from
 * the table below, and nothing else in the project names a format.
 */
#include "format.h"
#include "remote.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern const cfs_format cfs_format_h5ad;
extern const cfs_format cfs_format_h5mu;
extern const cfs_format cfs_format_loom;
extern const cfs_format cfs_format_tenx;
extern const cfs_format cfs_format_outs;
extern const cfs_format cfs_format_mtx;
extern const cfs_format cfs_format_zarr;
extern const cfs_format cfs_format_mudata_zarr;
extern const cfs_format cfs_format_rds;

/* Asked in this order; on equal bids the earlier one wins, and the first explain that knows an
 * input gives the reason it is refused. */
static const cfs_format *const builtin[] = {
    &cfs_format_h5ad,
    &cfs_format_h5mu,
    &cfs_format_loom,
    &cfs_format_tenx,
    &cfs_format_outs,
    &cfs_format_mtx,
    &cfs_format_zarr,
    &cfs_format_mudata_zarr,
    &cfs_format_rds,
    NULL,
};

static const cfs_format *const *formats = builtin;

void cfs_format_preload(void)
{
    for (const cfs_format *const *f = formats; *f; f++)
        if ((*f)->preload)
            (*f)->preload();
}

const cfs_format *const *cfs_formats(void)
{
    return formats;
}

const cfs_format *const *cfs_formats_replace(const cfs_format *const *table)
{
    const cfs_format *const *old = formats;
    formats = table ? table : builtin;
    return old;
}

static bool ends_with(const char *name, size_t n, const char *ext)
{
    size_t e = strlen(ext);
    return n > e && strncasecmp(name + n - e, ext, e) == 0;
}

/* The longest extension of any format that name[0..n) ends with, or 0. */
static size_t extension_len(const char *name, size_t n)
{
    size_t best = 0;
    for (size_t f = 0; formats[f]; f++)
        for (const char *const *e = formats[f]->extensions; e && *e; e++)
            if (strlen(*e) > best && ends_with(name, n, *e))
                best = strlen(*e);
    return best;
}

static const char *const compressed[] = {".gz", ".bz2", ".xz", NULL};

bool cfs_format_candidate_name(const char *name)
{
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    size_t n = strlen(base);
    for (size_t i = 0; compressed[i]; i++)
        if (ends_with(base, n, compressed[i]) && extension_len(base, n - strlen(compressed[i])))
            return true;
    return extension_len(base, n) > 0;
}

size_t cfs_format_stem_len(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; compressed[i]; i++) {
        size_t c = strlen(compressed[i]);
        size_t e = ends_with(name, n, compressed[i]) ? extension_len(name, n - c) : 0;
        if (e)
            return n - c - e;
    }
    return n - extension_len(name, n);
}

bool cfs_format_unnamed_folder(const char *name, size_t n)
{
    for (size_t f = 0; formats[f]; f++)
        for (const char *const *u = formats[f]->unnamed_folders; u && *u; u++)
            if (strlen(*u) == n && strncmp(name, *u, n) == 0)
                return true;
    return false;
}

void cfs_format_print_list(FILE *out, const char *indent)
{
    for (size_t f = 0; formats[f]; f++)
        fprintf(out, "%s%s\n", indent, formats[f]->summary);
}

const char *cfs_format_list_text(char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t f = 0; formats[f] && at < len; f++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s",
                               f == 0 ? "" : formats[f + 1] ? ", " : " and ", formats[f]->summary);
    return buf;
}

/* The format whose extension the name ends with (the longest one), for "whatever its name
 * says"; *ext receives that extension. */
static const cfs_format *claimed_by(const char *name, const char **ext)
{
    size_t n = strlen(name);
    for (size_t f = 0; formats[f]; f++)
        for (const char *const *e = formats[f]->extensions; e && *e; e++)
            if (ends_with(name, n, *e) && strlen(*e) == extension_len(name, n))
                return *ext = *e, formats[f];
    return NULL;
}

static void folder_formats_text(char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t f = 0; formats[f] && at < len; f++)
        if (formats[f]->folders)
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "",
                                   formats[f]->summary);
}

/* Why nobody bid: a format of the input's family says, else what the table knows. */
static const cfs_format *explain(cfs_probe_input *in, cfs_err *err)
{
    for (size_t f = 0; formats[f]; f++) {
        int rc = formats[f]->explain ? formats[f]->explain(in, err) : 0;
        if (rc > 0)
            return formats[f];
        if (rc < 0)
            return NULL;
    }
    const char *ext = NULL;
    const cfs_format *claimed = claimed_by(cfs_probe_name(in), &ext);
    if (cfs_probe_is_dir(in)) {
        char folders[512];
        folder_formats_text(folders, sizeof folders);
        cfs_err_setc(err, CFS_EREFUSED, "a folder that is not a single-cell data set this "
                     "version reads (the folders it reads are %s)", folders);
    } else if (cfs_probe_size(in) == 0) {
        cfs_err_setc(err, CFS_EDAMAGED, "an empty file (0 bytes); re-download or re-write it");
    } else if (claimed && claimed->container) {
        cfs_err_setc(err, CFS_EDAMAGED, "not an %s file (no %s signature); it is not a %s "
                     "file, whatever its name says: re-download or re-write it",
                     claimed->container, claimed->container, ext);
    } else if (claimed) {
        cfs_err_setc(err, CFS_EDAMAGED, "its content is not that of a %s file, whatever its "
                     "name says: re-download or re-write it", ext);
    } else {
        char list[900];
        cfs_err_setc(err, CFS_EREFUSED, "not a recognised single-cell file (this version reads "
                     "%s): convert it to .h5ad", cfs_format_list_text(list, sizeof list));
    }
    return NULL;
}

static const cfs_format *detect(cfs_probe_input *in, cfs_err *err)
{
    const cfs_format *best = NULL;
    int best_bid = 0;
    for (size_t i = 0; formats[i]; i++) {
        int bid = formats[i]->probe(in);
        if (bid > best_bid) {
            best_bid = bid;
            best = formats[i];
        }
    }
    return best ? best : explain(in, err);
}

static bool peek_bid(cfs_probe_input *in)
{
    size_t len;
    const unsigned char *head = cfs_probe_peek(in, &len);
    for (size_t f = 0; head && formats[f]; f++)
        if (formats[f]->peek_probe && formats[f]->peek_probe(head, len) > 0)
            return true;
    return false;
}

bool cfs_format_needs_unpack(const char *path, const char **codec)
{
    cfs_probe_input *in;
    cfs_err ignored;
    if (cfs_probe_input_open(path, &in, &ignored) < 0)
        return false;
    *codec = cfs_probe_compression(in);
    bool needs = false;
    if (*codec) {
        needs = peek_bid(in);
        for (size_t f = 0; needs && formats[f]; f++)
            needs = formats[f]->probe(in) == 0;
    }
    cfs_probe_input_close(in);
    return needs;
}

/* Whether url is fetched with the files beside it: a format's url_companions took it (its
 * refusal, if it has one, comes from the fetch). */
static bool fetched_with_companions(const char *url)
{
    cfs_url_member *m;
    size_t n;
    cfs_err ignored;
    int rc = cfs_url_members(url, &m, &n, &ignored);
    cfs_url_members_free(m, n);
    return rc != 0;
}

bool cfs_format_fetched_whole(const char *url, const char **codec)
{
    if (fetched_with_companions(url)) {
        *codec = NULL;
        return true;
    }
    return cfs_format_reads_whole(url, codec) || cfs_format_needs_unpack(url, codec);
}

/* The built-in formats' names for base, collected once (cfs_format_url_shapes). */
#define MAX_URL_NAMES 16

static struct {
    pthread_once_t once;
    const char *suffixes[MAX_URL_NAMES + 1];
    const char *version_keys[MAX_URL_NAMES + 1];
    cfs_url_shapes shapes;
} url_names = {.once = PTHREAD_ONCE_INIT};

/* Adds each of names not in into into (NULL-terminated, MAX_URL_NAMES at most). */
static void collect(const char **into, const char *const *names)
{
    for (; names && *names; names++) {
        size_t i = 0;
        while (into[i] && strcmp(into[i], *names) != 0)
            i++;
        if (!into[i] && i < MAX_URL_NAMES)
            into[i] = *names;
    }
}

/* The first format's url_companions that takes the input (the table's order). */
static int companions(const char *name, cfs_url_exists exists, void *ctx, cfs_strlist *out,
                      cfs_err *err)
{
    int rc = 0;
    for (size_t f = 0; builtin[f] && rc == 0; f++)
        if (builtin[f]->url_companions)
            rc = builtin[f]->url_companions(name, exists, ctx, out, err);
    return rc;
}

static void collect_url_names(void)
{
    for (size_t f = 0; builtin[f]; f++) {
        collect(url_names.suffixes, builtin[f]->url_folder_suffixes);
        collect(url_names.version_keys, builtin[f]->url_folder_version_keys);
    }
    url_names.shapes = (cfs_url_shapes){url_names.suffixes, url_names.version_keys, companions};
}

const cfs_url_shapes *cfs_format_url_shapes(void)
{
    pthread_once(&url_names.once, collect_url_names);
    return &url_names.shapes;
}

bool cfs_format_reads_whole(const char *path, const char **codec)
{
    *codec = NULL;
    cfs_probe_input *in;
    cfs_err ignored;
    if (cfs_probe_input_open(path, &in, &ignored) < 0)
        return false;
    bool whole = false;
    for (size_t f = 0; !whole && formats[f]; f++)
        whole = formats[f]->reads_whole && formats[f]->probe(in) > 0;
    if (whole)
        *codec = cfs_probe_compression(in);
    cfs_probe_input_close(in);
    return whole;
}

const cfs_format *cfs_format_detect(const char *path, cfs_err *err)
{
    cfs_probe_input *in;
    if (cfs_probe_input_open(path, &in, err) < 0)
        return NULL;
    const cfs_format *f = detect(in, err);
    cfs_probe_input_close(in);
    return f;
}

int cfs_format_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    return cfs_format_open_part(path, NULL, out, err);
}

/* The winner's open, of the whole input or of one of its parts. */
static int open_with(const cfs_format *f, const char *path, const char *part, cfs_dataset **out,
                     cfs_err *err)
{
    if (!part)
        return f->open(path, out, err);
    if (!f->open_part)
        return cfs_err_setc(err, CFS_ENOTFOUND, "a %s input holds one dataset, not parts (asked "
                            "for '%s')", f->name, part);
    return f->open_part(path, part, out, err);
}

/* The shortest extension of the format the name is claimed by once a compression's extension is
 * taken off ("x_matrix.mtx.gz": ".mtx"), for naming what a URL holds; or NULL. */
static const char *claimed_extension(const char *name)
{
    size_t n = strlen(name), c = 0;
    for (size_t i = 0; compressed[i] && !c; i++)
        c = ends_with(name, n, compressed[i]) ? strlen(compressed[i]) : 0;
    char *stem = strndup(name, n - c);
    const char *ext = NULL;
    const cfs_format *f = stem ? claimed_by(stem, &ext) : NULL;
    free(stem);
    for (const char *const *e = f ? f->extensions : NULL; e && *e; e++)
        ext = *e;
    return f ? ext : NULL;
}

/* Over a URL, inputs are read in parts (the HDF5 ones, and the formats that read URLs: Zarr
 * stores) or fetched whole first (R objects and compressed copies of those, and inputs fetched
 * with the files beside them, a MatrixMarket matrix named as its reader expects:
 * cfs_format_fetched_whole, never opened here); others are refused (docs/design.md §11). A
 * format that finds an input by the files beside it does not bid on a URL, which has nothing
 * beside it: a URL its url_companions does not take (a matrix named otherwise) is named by its
 * extension. */
static const cfs_format *remote_refusal(const cfs_probe_input *in, const cfs_format *f,
                                        cfs_err *err)
{
    if (f && (f->reads_urls || (f->container && strcmp(f->container, "HDF5") == 0)))
        return f;
    size_t len;
    const unsigned char *head = cfs_probe_head(in, &len);
    bool hdf5 = len >= 8 && memcmp(head, "\x89HDF\r\n\x1a\n", 8) == 0;
    /* an HDF5 file nobody reads keeps the readers' reason, and a folder URL (a Zarr store's)
     * the explanation of why it was not read */
    if (f || (!hdf5 && !cfs_probe_is_dir(in))) {
        const char *ext = f ? NULL : claimed_extension(cfs_probe_name(in));
        cfs_err_setc(err, CFS_EREFUSED, "%s%s%s is not read over HTTP yet (HDF5 inputs and Zarr "
                     "stores are: h5ad, loom, 10x .h5, .h5mu, .zarr.zip, consolidated .zarr "
                     "folders; R objects and compressed copies of those, and MatrixMarket "
                     "matrices named as Cell Ranger or GEO name them, with their lists, fetched "
                     "whole); download it, with the files it needs beside it, and use the copy",
                     f ? f->name : ext ? "a " : cfs_probe_compression(in) ? "a compressed copy"
                                                                         : "this input",
                     ext ? ext : "", ext ? " file" : "");
    }
    return NULL;
}

int cfs_format_open_part(const char *path, const char *part, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    cfs_probe_input *in;
    if (cfs_probe_input_open(path, &in, err) < 0)
        return -1;
    const cfs_format *f = detect(in, err);
    if (cfs_is_url(path))
        f = remote_refusal(in, f, err);
    /* The input stays open through the winner's open: what the probes opened (an HDF5 file with
     * its metadata cache warm) serves that open too. */
    int rc = f ? open_with(f, path, part, out, err) : -1;
    cfs_probe_input_close(in);
    if (rc == 0 && !((*out)->format = strdup(f->name))) {
        cfs_dataset_free(*out);
        *out = NULL;
        rc = cfs_err_oom(err);
    }
    if (rc < 0 && err->status == CFS_EFAIL)
        err->status = CFS_EREFUSED;
    return rc;
}

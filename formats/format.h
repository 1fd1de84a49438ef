/*
 * The format registry (libarchive's reader model; docs/design.md §10). Each input format is one
 * file (or one folder of files) defining a cfs_format: a probe, which bids from content, an
 * open, which builds the dataset model from metadata only, and what people and the folder scan
 * need to know of it. The table in formats/registry.c lists them; everything that depends on
 * which formats exist (the folder scan, the id rules, the refusal text, --help) is derived from
 * that table. Adding a format is its file plus one line in the table.
 */
#ifndef CFS_FORMAT_H
#define CFS_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "model.h"
#include "probe.h"
#include "remote.h"

typedef struct cfs_format {
    /* The registry name: ds->format, inspect's "format", datasets.json. */
    const char *name;
    /* One line for people, e.g. "Loom files (.loom, loompy 2 and 3 and older)". */
    const char *summary;
    /* Name endings of its files, longest first, NULL-terminated (NULL: none, a folder format):
     * which names a folder scan probes, and what the id rules strip from a file's name. */
    const char *const *extensions;
    /* True if its inputs are folders (a format may take files too: the MatrixMarket reader
     * takes a folder of one matrix and a GEO <prefix>matrix.mtx file). */
    bool folders;
    /* The container its files are (e.g. "HDF5"), for "not an HDF5 file" messages; or NULL. */
    const char *container;
    /* True if it reads its inputs given as URLs (§11) other than HDF5 files, which are read
     * over HTTP by their driver whatever the format. */
    bool reads_urls;
    /* Over a URL (§11), for a format that reads folder URLs key by key (Zarr): the name endings
     * of URLs that are such folders (one ending in "/" always is), and the keys whose version
     * is the folder's, tried in order (its consolidated metadata). NULL-terminated, or NULL.
     * The registry hands them to base (cfs_format_url_shapes): base names no format's files. */
    const char *const *url_folder_suffixes;
    const char *const *url_folder_version_keys;
    /* Optional, over a URL (§11), for a format that finds an input by the files beside it (a
     * MatrixMarket matrix and its lists): such a URL is fetched whole, with the files its
     * reader would read beside it, into one folder, opened as a local one. As
     * cfs_url_shapes.companions: the keys beside the object name (NULL: in a folder URL) its
     * reader would read, asking exists which the server has; 1, 0 (not its input) or -1. */
    int (*url_companions)(const char *name, cfs_url_exists exists, void *ctx, cfs_strlist *out,
                          cfs_err *err);
    /* Folder names that say nothing of the data (Cell Ranger's "outs"): an input so named takes
     * the name of the folder holding it. NULL-terminated, or NULL. */
    const char *const *unnamed_folders;
    /* Sub-folders below any folder where its inputs also live, as paths with '*' standing for
     * any one name ("per_sample_outs/ * /count" without the spaces); NULL-terminated, or NULL. */
    const char *const *nested;
    /* 0 = not mine; 1..100 = confidence. Must not fail loudly: it is asked about everything. */
    int (*probe)(cfs_probe_input *in);
    /* Optional, for formats that need their file on disk: a bid on the first bytes of the
     * stream inside a gzip, bzip2 or xz file (cfs_probe_peek). One that bids makes such a copy
     * an input to decompress first (cfs_format_needs_unpack); its format is then detected on
     * the decompressed file as on any other. */
    int (*peek_probe)(const unsigned char *head, size_t len);
    /* Optional: its open reads the whole input (R's serialized stream has no index), keeping
     * large values where they lie in a plain file. A compressed input it bids on is opened from
     * its decompressed copy where the front end makes one (cfs_format_reads_whole), and the
     * mount opens its inputs in the background. Its probe must read only the probe input's
     * bytes (it is asked in the daemon, outside the reader workers). */
    bool reads_whole;
    /* Builds the model. On refusal returns -1 with a one-line reason in err (what is wrong and
     * what to do; the caller prefixes the file name). The registry sets ds->format. */
    int (*open)(const char *path, cfs_dataset **out, cfs_err *err);
    /* Optional, for inputs that hold several datasets (an R workspace of several objects):
     * open reports them all in ds->parts and opens one of them; this opens the part named
     * part. The catalog opens each other part so (cfs_format_open_part). */
    int (*open_part)(const char *path, const char *part, cfs_dataset **out, cfs_err *err);
    /* Optional, asked in table order when no format bids: 0 if the input is not of its family;
     * -1 with the reason in err if it is and cannot be read; 1 if it opens after all (the probe
     * was too strict), which makes this format the one detected. */
    int (*explain)(cfs_probe_input *in, cfs_err *err);
    /* Optional: readies what its reader's library sets up once per process (libhdf5's types,
     * error stacks and filters), so that processes forked afterwards start with it done. */
    void (*preload)(void);
} cfs_format;

/* The table, NULL-terminated, in the order formats are asked. */
const cfs_format *const *cfs_formats(void);
/* Puts table (NULL: the built-in one) in its place and returns the one it replaces: how a unit
 * test adds a format the binary does not ship. Not thread-safe; never used by the program. */
const cfs_format *const *cfs_formats_replace(const cfs_format *const *table);

/* Calls every format's preload: the reader workers' fork server does, once, before it forks. */
void cfs_format_preload(void);

/* The format that bids highest for path, or NULL with a reason in err. */
const cfs_format *cfs_format_detect(const char *path, cfs_err *err);
/* Detects and opens; sets ds->format. On failure err holds the reason (without the file name). */
int cfs_format_open(const char *path, cfs_dataset **out, cfs_err *err);
/* The same for one part of an input of several (part NULL: cfs_format_open). */
int cfs_format_open_part(const char *path, const char *part, cfs_dataset **out, cfs_err *err);

/* True if the name ends with an extension of some format, optionally followed by ".gz",
 * ".bz2" or ".xz" (worth probing in a folder scan). */
bool cfs_format_candidate_name(const char *name);
/* True if path is a compressed copy (gzip, bzip2, xz) that no format reads as it is and one
 * reads once decompressed (its peek_probe bids); *codec receives the compression's name. The
 * caller decompresses it (cfs_unpack_file) and opens the copy. */
bool cfs_format_needs_unpack(const char *path, const char **codec);
/* True if a format that reads its whole input (reads_whole) bids on path; *codec receives the
 * file's compression ("gzip", "bzip2", "xz": open it from its decompressed copy) or NULL. Only
 * those formats' probes are asked. */
bool cfs_format_reads_whole(const char *path, const char **codec);
/* True if the input at url is not read in parts but fetched whole first into the front end's
 * work space (docs/design.md §11): one a reads_whole format bids on (an R object), a
 * compressed copy (cfs_format_needs_unpack), or one fetched with the files beside it
 * (url_companions: a MatrixMarket matrix, or a folder URL of one; *codec NULL). *codec as for
 * those. */
bool cfs_format_fetched_whole(const char *url, const char **codec);
/* What base is to know of URL sources, from the built-in table: its formats' folder suffixes
 * and folder version keys, and their companions hooks. The front end hands it to its reader of
 * URLs (cfs_remote_ops.shapes). */
const cfs_url_shapes *cfs_format_url_shapes(void);
/* The length of name without the longest format extension it ends with (compared without
 * case), optionally followed by ".gz", ".bz2" or ".xz"; strlen(name) when it has none. */
size_t cfs_format_stem_len(const char *name);
/* True if name[0..n) is one of the formats' unnamed_folders. */
bool cfs_format_unnamed_folder(const char *name, size_t n);
/* Prints one line per format, "  <indent><summary>", for --help. */
void cfs_format_print_list(FILE *out, const char *indent);
/* "AnnData .h5ad files (...), Loom files (...) and ..." (the summaries, joined) in buf, cut to
 * len; returns buf. For messages. */
const char *cfs_format_list_text(char *buf, size_t len);

#endif

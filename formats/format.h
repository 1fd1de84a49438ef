/*
 * The format registry (libarchive's reader model): each input format is one file with a probe,
 * which bids from content, and an open, which builds the dataset model from metadata only.
 * Adding a format touches formats/registry.c and nothing else.
 */
#ifndef CFS_FORMAT_H
#define CFS_FORMAT_H

#include <stddef.h>

#include "model.h"

/* What the registry has learned about an input before asking formats to bid. */
typedef struct cfs_probe_input {
    const char *path;
    int is_dir;
    const unsigned char *head;     /* first bytes of a regular file */
    size_t head_len;
    long long hdf5_offset;         /* offset of the HDF5 superblock, or -1 */
    /* The HDF5 file, opened by the first bidder that asks and shared by the rest (see
     * cfs_h5_probe in hdf5_util.h); the registry closes it after the winner's open. */
    struct cfs_probe_hdf5 *hdf5;
} cfs_probe_input;

typedef struct cfs_format {
    const char *name;
    /* 0 = not mine; 1..100 = confidence. Must not fail loudly: it is asked about everything. */
    int (*probe)(const cfs_probe_input *in);
    /* Builds the model. On refusal returns -1 with a one-line reason in err (what is wrong and
     * what to do; the caller prefixes the file name). */
    int (*open)(const char *path, cfs_dataset **out, cfs_err *err);
} cfs_format;

/* The format that bids highest for path, or NULL with a reason in err. */
const cfs_format *cfs_format_detect(const char *path, cfs_err *err);
/* Detects and opens. On failure err holds the reason (without the file name). */
int cfs_format_open(const char *path, cfs_dataset **out, cfs_err *err);

/* True if the name looks like an input worth probing when scanning a folder. */
int cfs_format_candidate_name(const char *name);

#endif

/*
 * What a format's probe may look at: an input (a regular file or a folder) read at any offset,
 * its first bytes, the first bytes of the stream inside a gzip, bzip2 or xz file, and state a
 * family of formats shares during one detection (the HDF5 readers keep the opened file there).
 * Everything is read lazily, on the first probe that asks, and at most once per detection.
 */
#ifndef CFS_PROBE_H
#define CFS_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

typedef struct cfs_probe_input cfs_probe_input;

/* How many of the first bytes cfs_probe_head and cfs_probe_peek give at most. */
#define CFS_PROBE_HEAD_LEN 4096

/* The input at path: a regular file or a folder; -1 with the reason otherwise ("cannot be
 * opened: ...", "not a regular file or a folder"). A regular file's first bytes are read here,
 * so an unreadable file is refused once, with its reason, before any format is asked. */
int cfs_probe_input_open(const char *path, cfs_probe_input **out, cfs_err *err);
/* Releases every shared state (cfs_probe_memo) and closes the file. */
void cfs_probe_input_close(cfs_probe_input *in);

const char *cfs_probe_path(const cfs_probe_input *in);
bool cfs_probe_is_dir(const cfs_probe_input *in);
/* The file's size in bytes (0 for a folder). */
uint64_t cfs_probe_size(const cfs_probe_input *in);
/* The file's base name (after the last '/'). */
const char *cfs_probe_name(const cfs_probe_input *in);

/* Up to len bytes at off, anywhere in the file (the tail too: off = size - len); the count read
 * (short only at the end of the file), or -1 if the file cannot be read. */
ssize_t cfs_probe_read(cfs_probe_input *in, uint64_t off, void *buf, size_t len);
/* The first bytes (up to CFS_PROBE_HEAD_LEN; fewer in a short file), read once. */
const unsigned char *cfs_probe_head(const cfs_probe_input *in, size_t *len);

/* The compression of the file by its magic bytes: "gzip", "bzip2", "xz", or NULL. */
const char *cfs_probe_compression(const cfs_probe_input *in);
/*
 * The first bytes of the stream inside a compressed file (up to CFS_PROBE_HEAD_LEN), inflated
 * once, on the first call; NULL with *len = 0 when the file is not compressed or its first
 * bytes do not inflate. One layer only: a .gz of a gzip file peeks at the inner gzip header.
 */
const unsigned char *cfs_probe_peek(cfs_probe_input *in, size_t *len);

/*
 * State shared by the probes of one detection, under key (the address of something of the
 * caller's): made by make(in) on the first call, returned as is on later ones (NULL if make
 * failed, without asking again), released by release(state) when the input is closed.
 */
void *cfs_probe_memo(cfs_probe_input *in, const void *key, void *(*make)(cfs_probe_input *in),
                     void (*release)(void *state));

#endif

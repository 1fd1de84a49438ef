/*
 * A layout result kept as the store's chunks (docs/design.md §7, encoded results). The sorter
 * that makes a range of a 1-d result encodes each chunk lying whole in the range with the store's
 * codec and appends it to a work file, so that the pass writes, and a reader of the store copies,
 * the store's bytes rather than the raw values (about three times as many). A chunk that two
 * ranges share is kept raw in a slot of a second work file, each range writing its part there,
 * and is encoded by its reader. Without a codec every value is kept raw, in place.
 */
#ifndef CFS_KEPT_CHUNKS_H
#define CFS_KEPT_CHUNKS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"
#include "model.h"

typedef struct cfs_kept_chunks {
    const cfs_chunk_codec *codec;   /* NULL: every value kept raw */
    size_t esize;
    uint64_t total, chunk_len, nchunks;
    uint64_t *off;                  /* where chunk j's bytes are in enc_fd, */
    uint32_t *len;                  /* and how many; 0: kept raw, in raw_fd */
    uint64_t *slot;                 /* where chunk j is in raw_fd, plus one; 0: none yet */
    uint64_t tail;                  /* bytes appended to enc_fd (atomic) */
    uint64_t slots;                 /* slots given out in raw_fd (under lock) */
    pthread_mutex_t lock;
    int raw_fd, enc_fd;
} cfs_kept_chunks;

/* One writer's buffers, kept across its ranges. */
typedef struct cfs_kept_writer {
    cfs_buf enc;                    /* encoded chunks not written yet */
    uint64_t *pending;              /* their chunk numbers, */
    size_t *ends;                   /* and where each ends in enc */
    size_t npending, cap;
    unsigned char *pad;             /* the last chunk, zero padded to a whole one */
    size_t pad_cap;
} cfs_kept_writer;

/* The work bytes kept chunks of `total` elements of esize bytes may take (counted before the
 * pass): each chunk encoded at its codec's bound, or raw in its slot. */
uint64_t cfs_kept_bound(const cfs_chunk_codec *codec, size_t esize, uint64_t total,
                        uint64_t chunk_len);
/* The work bytes the kept chunks take once every range is kept: what their files hold. */
uint64_t cfs_kept_bytes(cfs_kept_chunks *k);
/* Nothing open: cfs_kept_close does nothing. */
void cfs_kept_init(cfs_kept_chunks *k);
int cfs_kept_open(cfs_kept_chunks *k, const char *workdir, const cfs_chunk_codec *codec,
                  size_t esize, uint64_t total, uint64_t chunk_len, cfs_err *err);
void cfs_kept_close(cfs_kept_chunks *k);

/* Keeps values[0..n) as entries first..first+n of the result. Writers at once keep disjoint
 * ranges; a range is readable once its cfs_kept_write has returned. */
int cfs_kept_write(cfs_kept_chunks *k, cfs_kept_writer *w, const void *values, uint64_t first,
                   uint64_t n, cfs_err *err);
void cfs_kept_writer_free(cfs_kept_writer *w);

/* Reads entries start..start+count, every range holding them kept. */
int cfs_kept_read(const cfs_kept_chunks *k, uint64_t start, uint64_t count, void *out,
                  cfs_err *err);
/* Appends chunk idx (of chunk_len entries, encoded by codec codec_id) to out and returns 1 when
 * it is kept so; 0 when it is not (kept raw, or asked with another codec or length). */
int cfs_kept_encoded(const cfs_kept_chunks *k, uint64_t idx, uint64_t chunk_len, int codec_id,
                     cfs_buf *out, cfs_err *err);

#endif

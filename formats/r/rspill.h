/*
 * The spill sink: the large vectors of an R stream (robject.h's sink) written to one spill file
 * as they are read, so that opening an object holds only its tree and small vectors in memory;
 * the model's large arrays (matrix values and indices) then read them back by range. The file
 * is unlinked at creation (O_TMPFILE where the folder allows it): its space goes back to the
 * system when the reader is freed or the process ends, whatever happens.
 */
#ifndef CFS_R_SPILL_H
#define CFS_R_SPILL_H

#include <stdint.h>

#include "error.h"
#include "model.h"
#include "robject.h"

typedef struct r_spill r_spill;

/* A spill file in folder dir. NULL with err. */
r_spill *r_spill_new(const char *dir, cfs_err *err);
void r_spill_free(r_spill *s);
/* The sink that fills s. */
r_sink r_spill_sink(r_spill *s);
/* What vector id is (as the stream announced it), NULL if unknown. */
const r_sink_vec *r_spill_info(const r_spill *s, uint64_t id);
/* count elements of vector id from element first, into out (host order). */
int r_spill_read(const r_spill *s, uint64_t id, uint64_t first, uint64_t count, void *out,
                 cfs_err *err);
/* Bytes written to the spill file. */
uint64_t r_spill_bytes(const r_spill *s);
/* A 1-d array of dtype over vector id (whose element size must be dtype's), reading the
 * spill file; it keeps s alive through ref, released with release(ref) when the array goes. */
cfs_array *r_spill_array(r_spill *s, uint64_t id, cfs_dtype dtype);
/* The folder spill files go to: $CELLUCID_FS_WORK_DIR (the daemon's and export's work space,
 * passed on to reader workers), else $TMPDIR, else /tmp. */
const char *r_spill_dir(void);
/* Counted references: each r_spill_array holds one; r_spill_free drops the creator's. */
r_spill *r_spill_ref(r_spill *s);

#endif

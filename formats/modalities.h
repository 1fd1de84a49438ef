/*
 * What every reader of a multimodal input shares (MuData .h5mu and Zarr, docs/design.md §3):
 * the order of the modalities, and each modality's obsmap/varmap, read from the file or, when
 * the file has none, derived from the names.
 */
#ifndef CFS_MODALITIES_H
#define CFS_MODALITIES_H

#include <stddef.h>

#include "model.h"

/* Reads one modality named name into ds (cfs_dataset_add_modality, then its maps). */
typedef int (*cfs_mod_reader)(cfs_dataset *ds, const char *name, void *ctx, cfs_err *err);

/* Reads the n present modalities in the order they are served in: the entries of order (the
 * file's own, e.g. MuData's mod-order; NULL: none) that name a present modality, first
 * mention only, then the other present ones in the order given. None present refuses. */
int cfs_mods_read(cfs_dataset *ds, char *const *present, size_t n, char *const *order,
                  size_t norder, cfs_mod_reader read, void *ctx, cfs_err *err);

/* Sets m's obsmap and varmap (taking the callers' references; either may be NULL: derived
 * from the global and modality obs/var names). A map read from the file must hold one
 * integer per global cell or feature (shape n or n x 1), each 0 or a row of the modality, and
 * every cell of the modality must be mapped exactly once. -1 with the reason in err. */
int cfs_modality_set_maps(cfs_dataset *ds, cfs_modality *m, cfs_array *obsmap,
                          cfs_array *varmap, cfs_err *err);

/* For inputs whose modalities measure the same cells and features of their own (an R
 * object's assays or alternative experiments): the global var becomes every modality's
 * features in turn (ds->n_vars their sum), each varmap its block of them, each obsmap derived
 * from the cells' names. ds's global obs must be set. -1 with the reason in err. */
int cfs_mods_stack(cfs_dataset *ds, cfs_err *err);

#endif

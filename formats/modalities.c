#include "modalities.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strset.h"

typedef unsigned long long ull;

#define MAP_ADVICE "; re-write the file with mudata (mdata.update(), then mdata.write(...))"

int cfs_mods_read(cfs_dataset *ds, char *const *present, size_t n, char *const *order,
                  size_t norder, cfs_mod_reader read, void *ctx, cfs_err *err)
{
    if (n == 0)
        return cfs_err_set(err, "its mod group holds no modality");
    bool *taken = calloc(n, sizeof *taken);
    if (!taken)
        return cfs_err_oom(err);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < norder; i++)
        for (size_t j = 0; rc == 0 && j < n; j++)
            if (!taken[j] && strcmp(order[i], present[j]) == 0) {
                taken[j] = true;
                rc = read(ds, present[j], ctx, err);
            }
    for (size_t j = 0; rc == 0 && j < n; j++)
        if (!taken[j])
            rc = read(ds, present[j], ctx, err);
    free(taken);
    return rc;
}

/* The index strings of a dataframe (obs or var) of root, read whole. */
static char **index_names(const cfs_elem *root, const char *axis, uint64_t *n, cfs_err *err)
{
    const cfs_elem *df = cfs_elem_child(root, axis);
    if (!df || !df->index || !df->index->values || df->index->values->dtype != CFS_STRING) {
        cfs_err_set(err, "%s has no string index to match its names" MAP_ADVICE, axis);
        return NULL;
    }
    *n = df->index->values->shape[0];
    char **names = calloc(*n ? *n : 1, sizeof *names);
    uint64_t start = 0;
    if (!names) {
        cfs_err_oom(err);
        return NULL;
    }
    if (cfs_array_read(df->index->values, &start, n, names, err) < 0) {
        free(names);
        return NULL;
    }
    return names;
}

/* map[g] = 1 + the modality row named as global entry g, 0 when there is none. */
static int map_from_names(const cfs_dataset *ds, const cfs_modality *m, const char *axis,
                          uint32_t *map, uint64_t n_global, cfs_err *err)
{
    uint64_t ng = 0, nm = 0;
    char **global = index_names(ds->root, axis, &ng, err);
    char **local = global ? index_names(m->root, axis, &nm, err) : NULL;
    cfs_strset *rows = local ? cfs_strset_new(nm) : NULL;
    int rc = rows ? 0 : -1;
    if (local && !rows)
        cfs_err_oom(err);
    for (uint64_t i = 0; rc == 0 && i < nm; i++)
        if (cfs_strset_add(rows, local[i], i + 1) < 0)
            rc = cfs_err_oom(err);
    for (uint64_t g = 0; rc == 0 && g < n_global && g < ng; g++) {
        uint64_t *row = cfs_strset_get(rows, global[g]);
        map[g] = row ? (uint32_t)*row : 0;
    }
    cfs_strset_free(rows);
    if (local)
        cfs_strings_free(local, nm);
    if (global)
        cfs_strings_free(global, ng);
    free(local);
    free(global);
    return rc;
}

/* The file's map, read whole into map (n_global values). */
static int map_from_array(const cfs_array *arr, const char *what, uint32_t *map,
                          uint64_t n_global, cfs_err *err)
{
    bool shape_ok = arr->shape[0] == n_global &&
                    (arr->ndim == 1 || (arr->ndim == 2 && arr->shape[1] == 1));
    if (arr->dtype == CFS_STRING || arr->dtype == CFS_COMPOUND || arr->dtype == CFS_BOOL ||
        cfs_dtype_is_float(arr->dtype) || !shape_ok)
        return cfs_err_set(err, "%s is not one integer per global entry (%llu)" MAP_ADVICE,
                           what, (ull)n_global);
    size_t size = cfs_dtype_size(arr->dtype);
    unsigned char *buf = malloc(n_global * size + 1);
    uint64_t start[2] = {0, 0}, count[2] = {n_global, 1};
    if (!buf)
        return cfs_err_oom(err);
    if (cfs_array_read(arr, start, count, buf, err) < 0) {
        free(buf);
        return -1;
    }
    int rc = 0;
    for (uint64_t g = 0; rc == 0 && g < n_global; g++) {
        int64_t v = 0;
        uint64_t u = 0;
        for (size_t k = 0; k < size; k++)
            u |= (uint64_t)buf[g * size + k] << (8 * k);
        v = (int64_t)u;
        if (cfs_dtype_is_signed(arr->dtype) && size < 8 && (u >> (8 * size - 1)))
            v = -1;
        if (v < 0 || u > UINT32_MAX)
            rc = cfs_err_set(err, "%s[%llu] is not a row number" MAP_ADVICE, what, (ull)g);
        else
            map[g] = (uint32_t)u;
    }
    free(buf);
    return rc;
}

/* Every value at most n_local; for cells, every local row mapped exactly once. */
static int check_map(const uint32_t *map, uint64_t n_global, uint64_t n_local, bool onto,
                     const char *what, cfs_err *err)
{
    unsigned char *seen = onto ? calloc(n_local ? n_local : 1, 1) : NULL;
    if (onto && !seen)
        return cfs_err_oom(err);
    int rc = 0;
    for (uint64_t g = 0; rc == 0 && g < n_global; g++) {
        if (map[g] > n_local)
            rc = cfs_err_set(err, "%s[%llu] = %u is past the modality's %llu rows" MAP_ADVICE,
                             what, (ull)g, map[g], (ull)n_local);
        else if (onto && map[g] && seen[map[g] - 1]++)
            rc = cfs_err_set(err, "%s maps two global cells to row %u" MAP_ADVICE, what, map[g]);
    }
    for (uint64_t i = 0; onto && rc == 0 && i < n_local; i++)
        if (!seen[i])
            rc = cfs_err_set(err, "%s maps no global cell to the modality's row %llu" MAP_ADVICE,
                             what, (ull)i);
    free(seen);
    return rc;
}

static int set_map(cfs_dataset *ds, cfs_modality *m, bool cells, cfs_array *from_file,
                   cfs_err *err)
{
    const char *axis = cells ? "obs" : "var";
    uint64_t n_global = cells ? ds->n_obs : ds->n_vars;
    uint64_t n_local = cells ? m->n_obs : m->n_vars;
    char what[300];
    snprintf(what, sizeof what, "%smap/%s", axis, m->name);
    uint32_t *map = calloc(n_global ? n_global : 1, sizeof *map);
    int rc = map ? 0 : cfs_err_oom(err);
    if (rc == 0)
        rc = from_file ? map_from_array(from_file, what, map, n_global, err)
                       : map_from_names(ds, m, axis, map, n_global, err);
    if (rc == 0)
        rc = check_map(map, n_global, n_local, cells, what, err);
    cfs_array_unref(from_file);
    cfs_array *arr = rc == 0 ? cfs_array_from_memory(CFS_UINT32, 1, &n_global, map) : NULL;
    if (rc == 0 && !arr)
        rc = cfs_err_oom(err);
    if (rc < 0) {
        if (!arr)
            free(map);
        return -1;
    }
    *(cells ? &m->obsmap : &m->varmap) = arr;
    return 0;
}

int cfs_modality_set_maps(cfs_dataset *ds, cfs_modality *m, cfs_array *obsmap,
                          cfs_array *varmap, cfs_err *err)
{
    if (set_map(ds, m, true, obsmap, err) < 0) {
        cfs_array_unref(varmap);
        return -1;
    }
    return set_map(ds, m, false, varmap, err);
}

/* The stacked features: every modality's var index in turn, as the global var. */
static int stacked_var(cfs_dataset *ds, cfs_err *err)
{
    uint64_t total = 0;
    for (size_t k = 0; k < ds->nmods; k++)
        total += ds->mods[k].n_vars;
    char **names = calloc(total ? total : 1, sizeof *names);
    if (!names)
        return cfs_err_oom(err);
    uint64_t at = 0;
    for (size_t k = 0; k < ds->nmods; k++) {
        uint64_t n = 0;
        char **local = index_names(ds->mods[k].root, "var", &n, err);
        if (!local || n != ds->mods[k].n_vars) {
            if (local)
                cfs_strings_free(local, n);
            free(local);
            cfs_strings_free(names, at);
            free(names);
            return local ? cfs_err_set(err, "mod/%s: its var is not its features",
                                       ds->mods[k].name) : -1;
        }
        memcpy(names + at, local, n * sizeof *names);
        free(local);
        at += n;
    }
    cfs_array *ix = cfs_array_from_memory(CFS_STRING, 1, &total, names);
    cfs_elem *var = cfs_elem_new(CFS_EL_DATAFRAME, "var");
    if (!ix || !var || !(var->index = cfs_elem_from_array(CFS_EL_ARRAY, "_index", ix)) ||
        !(var->index_name = strdup("_index"))) {
        if (!ix) {
            cfs_strings_free(names, total);
            free(names);
        } else if (!var || !var->index)
            cfs_array_unref(ix);
        cfs_elem_free(var);
        return cfs_err_oom(err);
    }
    cfs_elem_remove(ds->root, "var");
    ds->n_vars = total;
    return cfs_elem_add_or_free(ds->root, var, err);
}

int cfs_mods_stack(cfs_dataset *ds, cfs_err *err)
{
    if (stacked_var(ds, err) < 0)
        return -1;
    uint64_t offset = 0;
    for (size_t k = 0; k < ds->nmods; k++) {
        cfs_modality *m = &ds->mods[k];
        uint32_t *map = calloc(ds->n_vars ? ds->n_vars : 1, sizeof *map);
        for (uint64_t i = 0; map && i < m->n_vars; i++)
            map[offset + i] = (uint32_t)(i + 1);
        cfs_array *varmap = map ? cfs_array_from_memory(CFS_UINT32, 1, &ds->n_vars, map) : NULL;
        if (!varmap) {
            free(map);
            return cfs_err_oom(err);
        }
        if (cfs_modality_set_maps(ds, m, NULL, varmap, err) < 0)
            return cfs_err_prefix(err, "mod/%s", m->name);
        offset += m->n_vars;
    }
    return 0;
}

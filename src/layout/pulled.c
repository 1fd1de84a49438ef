#include "pulled.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedding.h"
#include "strfmt.h"

/* A global view of a modality's n_local x cols embedding: built whole at the first read. */
typedef struct pulled {
    cfs_array *src, *map;
    uint64_t n_global, n_local, cols;
    pthread_mutex_t lock;
    unsigned char *values; /* n_global x cols, src's dtype */
} pulled;

static int build(pulled *p, size_t esize, cfs_err *err)
{
    uint64_t start[2] = {0, 0}, count[2] = {p->n_local, p->cols};
    unsigned char *local = malloc(p->n_local * p->cols * esize + 1);
    uint32_t *map = malloc(p->n_global * sizeof *map + 1);
    unsigned char *out = malloc(p->n_global * p->cols * esize + 1);
    int rc = local && map && out ? 0 : cfs_err_oom(err);
    if (rc == 0 && (cfs_array_read(p->src, start, count, local, err) < 0 ||
                    cfs_array_read(p->map, start, &p->n_global, map, err) < 0))
        rc = -1;
    size_t row = p->cols * esize;
    for (uint64_t j = 0; rc == 0 && j < p->n_global; j++) {
        unsigned char *dst = out + j * row;
        if (map[j]) {
            memcpy(dst, local + (map[j] - 1) * row, row);
            continue;
        }
        for (uint64_t c = 0; c < p->cols; c++) {
            if (esize == sizeof(float)) {
                float nan = NAN;
                memcpy(dst + c * esize, &nan, esize);
            } else {
                double nan = NAN;
                memcpy(dst + c * esize, &nan, esize);
            }
        }
    }
    free(local);
    free(map);
    if (rc < 0) {
        free(out);
        return -1;
    }
    p->values = out;
    return 0;
}

static int pulled_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                       void *out, cfs_err *err)
{
    pulled *p = arr->ctx;
    size_t esize = cfs_dtype_size(arr->dtype);
    pthread_mutex_lock(&p->lock);
    int rc = p->values ? 0 : build(p, esize, err);
    pthread_mutex_unlock(&p->lock);
    if (rc < 0)
        return -1;
    uint64_t c0 = arr->ndim == 2 ? start[1] : 0, nc = arr->ndim == 2 ? count[1] : 1;
    unsigned char *dst = out;
    for (uint64_t r = 0; r < count[0]; r++) {
        memcpy(dst, p->values + ((start[0] + r) * p->cols + c0) * esize, nc * esize);
        dst += nc * esize;
    }
    return 0;
}

static void pulled_free(void *ctx)
{
    pulled *p = ctx;
    cfs_array_unref(p->src);
    cfs_array_unref(p->map);
    pthread_mutex_destroy(&p->lock);
    free(p->values);
    free(p);
}

static const cfs_array_ops pulled_ops = {pulled_read, pulled_free, NULL, NULL, NULL};

static cfs_elem *pull(const cfs_dataset *ds, const cfs_modality *m, const cfs_elem *el)
{
    const cfs_array *src = el->values;
    pulled *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    *p = (pulled){cfs_array_ref(el->values), cfs_array_ref(m->obsmap), ds->n_obs, m->n_obs,
                  src->ndim == 2 ? src->shape[1] : 1, PTHREAD_MUTEX_INITIALIZER, NULL};
    uint64_t shape[2] = {ds->n_obs, p->cols};
    cfs_array *arr = cfs_array_new(src->dtype, src->ndim, shape, &pulled_ops, p);
    if (!arr) {
        pulled_free(p);
        return NULL;
    }
    arr->level_rows = src->level_rows;   /* its rows are global cells, in the same order */
    char *name = cfs_strdupf("%s:%s", m->name, el->name);
    cfs_elem *out = name ? cfs_elem_from_array(CFS_EL_ARRAY, name, arr) : NULL;
    if (!name)
        cfs_array_unref(arr);
    free(name);
    return out;
}

static bool float_embedding(const cfs_elem *el, uint64_t n_obs)
{
    char why[256];
    return el->kind == CFS_EL_ARRAY && el->values &&
           (el->values->dtype == CFS_FLOAT32 || el->values->dtype == CFS_FLOAT64) &&
           cfs_embedding_drawable(el, n_obs, why, sizeof why);
}

/* A drawable float embedding in obsm: what the global cells are drawn from (a MuData's bool
 * membership columns, obsm/<modality>, are not one). */
static bool has_float_embedding(const cfs_elem *obsm, uint64_t n_obs)
{
    for (size_t k = 0; obsm && k < obsm->nchildren; k++)
        if (float_embedding(obsm->children[k], n_obs))
            return true;
    return false;
}

int cfs_pull_modality_embeddings(cfs_dataset *ds, cfs_err *err)
{
    if (ds->nmods == 0 || has_float_embedding(cfs_elem_child(ds->root, "obsm"), ds->n_obs))
        return 0;
    cfs_elem *obsm = cfs_elem_ensure_dict(ds->root, "obsm");
    if (!obsm)
        return cfs_err_oom(err);
    for (size_t i = 0; i < ds->nmods; i++) {
        const cfs_modality *m = &ds->mods[i];
        const cfs_elem *mobsm = cfs_elem_child(m->root, "obsm");
        size_t added = 0;
        for (size_t k = 0; mobsm && k < mobsm->nchildren; k++) {
            const cfs_elem *el = mobsm->children[k];
            if (!float_embedding(el, m->n_obs))
                continue;
            cfs_elem *g = pull(ds, m, el);
            if (!g || cfs_elem_add(obsm, g) < 0) {
                cfs_elem_free(g);
                return cfs_err_oom(err);
            }
            added++;
        }
        if (added)
            return 0;
    }
    return 0;
}

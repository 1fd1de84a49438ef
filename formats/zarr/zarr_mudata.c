/*
 * MuData Zarr stores (mudata's write_zarr, ../shared/reference/input-formats.md §6): a root
 * tagged encoding-type MuData with a mod/ group of AnnData groups (in mod/'s mod-order), the
 * global obs/var/obsm/obsp/uns as anndata writes them, and obsmap/varmap. Every AnnData part is
 * read by the AnnData Zarr reader (zarr_anndata.h); this file only adds the MuData frame.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "format.h"
#include "modalities.h"
#include "path.h"
#include "strfmt.h"
#include "zarr_anndata.h"
#include "zarr_array.h"
#include "zarr_backend.h"
#include "zarr_meta.h"
#include "zarr_zipprobe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AXIS_ADVICE "this version serves MuData whose modalities share cells (axis 0): " \
                    "write each modality as its own store (mdata[mod].write_zarr(...))"

static bool is_mudata(const zr_store *s)
{
    json_t *attrs;
    cfs_err ignore;
    if (zr_node_kind(s, "") != ZR_GROUP || zr_node_kind(s, "mod") != ZR_GROUP ||
        zr_attrs(s, "", &attrs, &ignore) < 0)
        return false;
    const char *enc = json_string_value(json_object_get(attrs, "encoding-type"));
    bool yes = enc && strcmp(enc, "MuData") == 0;
    json_decref(attrs);
    return yes;
}

static int mudata_zarr_probe(cfs_probe_input *in)
{
    if (!cfs_probe_is_dir(in) && !zr_zip_probe(in))
        return 0;
    zr_store *s;
    cfs_err ignore;
    if (zr_store_open(cfs_probe_path(in), &s, &ignore) < 0)
        return 0;
    bool yes = is_mudata(s);
    zr_store_free(s);
    return yes ? 100 : 0;
}

/* axis 0 (or none): modalities share cells; 1 and -1 share features: refused. */
static int root_attrs(const zr_store *s, cfs_dataset *ds, cfs_err *err)
{
    json_t *attrs;
    if (zr_attrs(s, "", &attrs, err) < 0)
        return -1;
    json_t *axis = json_object_get(attrs, "axis");
    int rc = 0;
    if (axis && (!json_is_integer(axis) || json_integer_value(axis) != 0))
        rc = cfs_err_setc(err, CFS_EREFUSED, "a MuData whose modalities share features rather "
                          "than cells (axis is not 0); " AXIS_ADVICE);
    const char *version = json_string_value(json_object_get(attrs, "encoding-version"));
    const char *encoder = json_string_value(json_object_get(attrs, "encoder"));
    const char *encoder_version = json_string_value(json_object_get(attrs, "encoder-version"));
    if (rc == 0 && ds) {
        free(ds->format_version);
        char by[128] = "";
        if (encoder && encoder_version)
            snprintf(by, sizeof by, " (%.40s %.40s)", encoder, encoder_version);
        ds->format_version = cfs_strdupf("MuData %s%s, Zarr v%d%s", version ? version : "?", by,
                                         zr_store_version(s),
                                         zr_store_zipped(s) ? ", in a zip" : "");
        if (!ds->format_version)
            rc = cfs_err_oom(err);
    }
    json_decref(attrs);
    return rc;
}

static int open_map(const zr_store *s, const char *group, const char *name, cfs_array **out,
                    cfs_err *err)
{
    *out = NULL;
    char *rel = cfs_strdupf("%s/%s", group, name);
    if (!rel)
        return cfs_err_oom(err);
    int rc = zr_node_kind(s, rel) == ZR_ARRAY ? zr_array_open(s, rel, out, err) : 0;
    free(rel);
    return rc;
}

typedef struct zmu_ctx {
    zr_store *s;
    const char *path;
} zmu_ctx;

/* A modality is read from its group's view of the store, so that it is read alike from a
 * folder and a zip, with the store's consolidated metadata. */
static int read_modality(cfs_dataset *ds, const char *name, void *ctx, cfs_err *err)
{
    const zmu_ctx *c = ctx;
    char *rel = cfs_strdupf("mod/%s", name);
    char *label = cfs_strdupf("%s/mod/%s", c->path, name);
    cfs_dataset *sub = NULL;
    zr_store *view = NULL;
    int rc = rel && label ? zr_store_group(c->s, rel, &view, err) : cfs_err_oom(err);
    if (rc == 0)
        rc = cfs_zarr_anndata_read_store(view, label, false, &sub, err);
    free(rel);
    free(label);
    cfs_modality *m = rc == 0 ? cfs_dataset_add_modality(ds, name, sub, err) : NULL;
    cfs_array *obsmap = NULL, *varmap = NULL;
    if (!m || open_map(c->s, "obsmap", name, &obsmap, err) < 0 ||
        open_map(c->s, "varmap", name, &varmap, err) < 0) {
        cfs_array_unref(obsmap);
        return cfs_err_prefix(err, "mod/%s", name);
    }
    return cfs_modality_set_maps(ds, m, obsmap, varmap, err);
}

static int read_modalities(cfs_dataset *ds, zr_store *s, const char *path, cfs_err *err)
{
    zmu_ctx c = {s, path};
    char **names = NULL, **order = NULL;
    size_t n = 0, norder = 0;
    json_t *attrs = NULL;
    cfs_err ignore;
    int rc = zr_children(s, "mod", &names, &n, err);
    if (rc == 0 && zr_attrs(s, "mod", &attrs, &ignore) == 0 &&
        json_object_get(attrs, "mod-order"))
        zr_attr_strings(attrs, "mod-order", &order, &norder, &ignore);
    json_decref(attrs);
    if (rc == 0)
        rc = cfs_mods_read(ds, names, n, order, norder, read_modality, &c, err);
    zr_names_free(names, n);
    zr_names_free(order, norder);
    return rc;
}

static int mudata_zarr_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    zr_store *s;
    if (zr_store_open(path, &s, err) < 0)
        return -1;
    cfs_dataset *ds = NULL;
    int rc = is_mudata(s) ? root_attrs(s, NULL, err)
                          : cfs_err_set(err, "a Zarr store but not MuData (no MuData root "
                                        "with a mod group)");
    if (rc == 0 && (rc = cfs_zarr_anndata_read_store(zr_store_ref(s), path, true, &ds, err)) < 0)
        cfs_err_prefix(err, "its global obs/var");
    if (rc == 0)
        rc = root_attrs(s, ds, err);
    if (rc == 0)
        rc = read_modalities(ds, s, path, err);
    zr_store_free(s);
    if (rc < 0) {
        cfs_dataset_free(ds);
        return -1;
    }
    *out = ds;
    return 0;
}

static const char *const mudata_zarr_extensions[] = {".zarr", ".zarr.zip", NULL};

const cfs_format cfs_format_mudata_zarr = {
    .name = "mudata-zarr",
    .summary = "MuData Zarr v2 and v3 stores (.zarr folders, .zarr.zip; mudata 0.2 and later)",
    .extensions = mudata_zarr_extensions,
    .folders = true,
    .reads_urls = true,
    .url_folder_suffixes = zr_url_folder_suffixes,
    .url_folder_version_keys = zr_url_folder_version_keys,
    .probe = mudata_zarr_probe,
    .open = mudata_zarr_open,
};

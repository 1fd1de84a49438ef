/*
 * MuData .h5mu files (mudata's write_h5mu, ../shared/reference/input-formats.md §6): a 512-byte
 * user block saying "MuData (format-version=...)", a root tagged encoding-type MuData, the
 * global obs/var/obsm/obsp/uns as anndata writes them, mod/<name> AnnData groups (in mod/'s
 * mod-order), and obsmap/varmap. Every AnnData part is read by the h5ad reader (h5ad.h), legacy
 * layouts included; this file only adds the MuData frame around them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "format.h"
#include "h5_array.h"
#include "h5ad.h"
#include "hdf5_util.h"
#include "modalities.h"
#include "strfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MUDATA_MAGIC "MuData"
#define AXIS_ADVICE "this version serves MuData whose modalities share cells (axis 0): " \
                    "write each modality as its own .h5ad (mdata[mod].write_h5ad(...))"

static bool is_mudata_root(hid_t file)
{
    char *enc = NULL;
    cfs_err ignore;
    bool yes = cfs_h5_attr_string(file, "encoding-type", &enc, &ignore) > 0 &&
               strcmp(enc, "MuData") == 0;
    free(enc);
    return yes;
}

static bool has_group(hid_t loc, const char *name)
{
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0)
        return false;
    hid_t obj = H5Oopen(loc, name, H5P_DEFAULT);
    bool yes = obj >= 0 && H5Iget_type(obj) == H5I_GROUP;
    if (obj >= 0)
        H5Oclose(obj);
    return yes;
}

static int h5mu_bid(hid_t file, void *ctx)
{
    bool user_block = *(const bool *)ctx;
    if (!has_group(file, "mod"))
        return 0;
    return is_mudata_root(file) ? 100 : user_block ? 95 : 0;
}

static int h5mu_probe(cfs_probe_input *in)
{
    size_t len = 0;
    const unsigned char *head = cfs_probe_head(in, &len);
    bool user_block = head && len >= 6 && memcmp(head, MUDATA_MAGIC, 6) == 0;
    return cfs_h5_probe(in, h5mu_bid, &user_block);
}

/* axis 0 (or none): modalities share cells. 1 and -1 share features: refused. */
static int check_axis(hid_t file, cfs_err *err)
{
    bool other = false;
    cfs_err ignore;
    if (cfs_h5_attr_bool(file, "axis", &other, &ignore) > 0 && other)
        return cfs_err_setc(err, CFS_EREFUSED, "a MuData whose modalities share features "
                            "rather than cells (axis is not 0); " AXIS_ADVICE);
    return 0;
}

static int open_map(hid_t file, const char *group, const char *name, cfs_array **out,
                    cfs_err *err)
{
    *out = NULL;
    char *path = cfs_strdupf("%s/%s", group, name);
    if (!path)
        return cfs_err_oom(err);
    int rc = has_group(file, group) && H5Lexists(file, path, H5P_DEFAULT) > 0
                 ? cfs_h5_array_open(file, path, out, err) : 0;
    free(path);
    return rc;
}

typedef struct h5mu_ctx {
    hid_t file, mods;
} h5mu_ctx;

static int read_modality(cfs_dataset *ds, const char *name, void *ctx, cfs_err *err)
{
    const h5mu_ctx *c = ctx;
    hid_t grp = H5Gopen2(c->mods, name, H5P_DEFAULT);
    if (grp < 0)
        return cfs_err_set(err, "mod/%s is not a group", name);
    cfs_dataset *sub = NULL;
    int rc = cfs_h5ad_read_group(ds->source, grp, false, &sub, err);
    H5Gclose(grp);
    cfs_modality *m = rc == 0 ? cfs_dataset_add_modality(ds, name, sub, err) : NULL;
    cfs_array *obsmap = NULL, *varmap = NULL;
    if (!m || open_map(c->file, "obsmap", name, &obsmap, err) < 0 ||
        open_map(c->file, "varmap", name, &varmap, err) < 0) {
        cfs_array_unref(obsmap);
        return cfs_err_prefix(err, "mod/%s", name);
    }
    return cfs_modality_set_maps(ds, m, obsmap, varmap, err);
}

static int read_modalities(cfs_dataset *ds, hid_t file, cfs_err *err)
{
    h5mu_ctx c = {file, H5Gopen2(file, "mod", H5P_DEFAULT)};
    char **names = NULL, **order = NULL;
    size_t n = 0, norder = 0;
    if (c.mods < 0)
        return cfs_err_set(err, "it has no mod group (MuData keeps its modalities there)");
    int rc = cfs_h5_group_names(c.mods, &names, &n, err);
    cfs_err ignore;
    if (rc == 0 && cfs_h5_has_attr(c.mods, "mod-order"))
        cfs_h5_attr_strings(c.mods, "mod-order", &order, &norder, &ignore);
    if (rc == 0)
        rc = cfs_mods_read(ds, names, n, order, norder, read_modality, &c, err);
    cfs_h5_names_free(names, n);
    cfs_h5_names_free(order, norder);
    H5Gclose(c.mods);
    return rc;
}

static int set_version(cfs_dataset *ds, hid_t file, cfs_err *err)
{
    char *version = NULL, *encoder = NULL, *encoder_version = NULL;
    cfs_err ignore;
    cfs_h5_attr_string(file, "encoding-version", &version, &ignore);
    cfs_h5_attr_string(file, "encoder", &encoder, &ignore);
    cfs_h5_attr_string(file, "encoder-version", &encoder_version, &ignore);
    free(ds->format_version);
    ds->format_version = encoder && encoder_version
        ? cfs_strdupf("MuData %s (%s %s)", version ? version : "?", encoder, encoder_version)
        : cfs_strdupf("MuData %s", version ? version : "?");
    free(version);
    free(encoder);
    free(encoder_version);
    return ds->format_version ? 0 : cfs_err_oom(err);
}

static int open_locked(const char *path, cfs_dataset **out, cfs_err *err)
{
    hid_t file = cfs_h5_input_open(path, err);
    if (file < 0)
        return -1;
    cfs_dataset *ds = NULL;
    int rc = check_axis(file, err);
    if (rc == 0 && !has_group(file, "mod"))
        rc = cfs_err_set(err, "it has no mod group (MuData keeps its modalities there)");
    if (rc == 0 && (rc = cfs_h5ad_read_group(path, file, true, &ds, err)) < 0)
        cfs_err_prefix(err, "its global obs/var");
    if (rc == 0)
        rc = set_version(ds, file, err);
    if (rc == 0)
        rc = read_modalities(ds, file, err);
    H5Fclose(file);
    if (rc < 0) {
        cfs_dataset_free(ds);
        return -1;
    }
    *out = ds;
    return 0;
}

static int h5mu_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    cfs_h5_lock();
    int rc = open_locked(path, out, err);
    cfs_h5_unlock();
    return rc;
}

static const char *const h5mu_extensions[] = {".h5mu", NULL};

const cfs_format cfs_format_h5mu = {
    .name = "h5mu",
    .summary = "MuData .h5mu files (mudata 0.2 and later)",
    .extensions = h5mu_extensions,
    .container = "HDF5",
    .probe = h5mu_probe,
    .peek_probe = cfs_h5_peek_probe,
    .open = h5mu_open,
};

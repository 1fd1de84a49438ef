#include "inspect.h"
#include "remote.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format.h"
#include "detect.h"
#include "identity.h"
#include "isolated.h"
#include "options.h"
#include "session.h"
#include "embedding.h"
#include "model.h"
#include "sparse_index.h"
#include "unpacked.h"
#include "zmeta.h"

/* The name anndata gives an element's encoding. */
static const char *encoding_name(const cfs_elem *el)
{
    switch (el->kind) {
    case CFS_EL_ARRAY:
        return el->values->dtype == CFS_STRING ? "string-array" : "array";
    case CFS_EL_SPARSE:
        return el->csr ? "csr_matrix" : "csc_matrix";
    case CFS_EL_SCALAR:
        return el->values->dtype == CFS_STRING ? "string" : "numeric-scalar";
    default:
        return cfs_elem_kind_name(el->kind);
    }
}

static const char *elem_dtype(const cfs_elem *el)
{
    if (el->kind == CFS_EL_CATEGORICAL)
        return el->categories && el->categories->values
                   ? cfs_dtype_name(el->categories->values->dtype) : NULL;
    return el->values ? cfs_dtype_name(el->values->dtype) : NULL;
}

static json_t *elem_shape(const cfs_elem *el)
{
    if (el->kind == CFS_EL_SPARSE)
        return cfs_json_u64_array(2, el->sparse_shape);
    if (el->values)
        return cfs_json_u64_array(el->values->ndim, el->values->shape);
    return json_null();
}

static json_t *columns(const cfs_elem *df)
{
    json_t *list = json_array();
    for (size_t i = 0; df && i < df->nchildren; i++) {
        const cfs_elem *c = df->children[i];
        json_array_append_new(list, json_pack("{s:s, s:s, s:s?}", "name", c->name, "type",
                                              encoding_name(c), "dtype", elem_dtype(c)));
    }
    return list;
}

static json_t *entries(const cfs_elem *root, uint64_t n_obs, const char *key, bool embeddings)
{
    const cfs_elem *m = cfs_elem_child(root, key);
    json_t *list = json_array();
    for (size_t i = 0; m && i < m->nchildren; i++) {
        const cfs_elem *e = m->children[i];
        json_t *o = json_pack("{s:s, s:s, s:s?, s:o}", "key", e->name, "encoding",
                              encoding_name(e), "dtype", elem_dtype(e), "shape", elem_shape(e));
        if (embeddings) {
            char why[256] = "";
            bool ok = cfs_embedding_drawable(e, n_obs, why, sizeof why);
            json_object_set_new(o, "drawable", json_boolean(ok));
            if (!ok)
                json_object_set_new(o, "why", json_string(why));
        }
        json_array_append_new(list, o);
    }
    return list;
}

/* Sparse elements whose reader gives indices and indptr in dtypes other than the store's one. */
static void index_dtype_changes(const cfs_elem *el, const char *path, json_t *list)
{
    if (el->kind == CFS_EL_SPARSE) {
        cfs_dtype stored = cfs_sparse_elem_index_dtype(el);
        if (el->aux->dtype != stored || el->indptr->dtype != stored)
            json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s}", "element", path,
                                                  "indices", cfs_dtype_name(el->aux->dtype),
                                                  "indptr", cfs_dtype_name(el->indptr->dtype),
                                                  "stored", cfs_dtype_name(stored)));
    }
    for (size_t i = 0; i < el->nchildren; i++) {
        char child[1024];
        snprintf(child, sizeof child, "%s%s%s", path, *path ? "/" : "", el->children[i]->name);
        index_dtype_changes(el->children[i], child, list);
    }
}

/* What an AnnData root holds: the dataset's, or one modality's. */
static json_t *describe_anndata(const cfs_elem *root, uint64_t n_obs)
{
    const cfs_elem *x = cfs_elem_child(root, "X");
    const cfs_elem *uns = cfs_elem_child(root, "uns");
    json_t *uns_keys = json_array();
    for (size_t i = 0; uns && i < uns->nchildren; i++)
        json_array_append_new(uns_keys, json_string(uns->children[i]->name));
    json_t *xdesc = x ? json_pack("{s:s, s:s?}", "encoding", encoding_name(x), "dtype",
                                  elem_dtype(x))
                      : json_null();
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b}",
                     "X", xdesc,
                     "obs", columns(cfs_elem_child(root, "obs")),
                     "var", columns(cfs_elem_child(root, "var")),
                     "obsm", entries(root, n_obs, "obsm", true),
                     "varm", entries(root, n_obs, "varm", false),
                     "obsp", entries(root, n_obs, "obsp", false),
                     "varp", entries(root, n_obs, "varp", false),
                     "layers", entries(root, n_obs, "layers", false), "uns", uns_keys,
                     "raw", cfs_elem_child(root, "raw") != NULL);
}

static json_t *describe_modalities(const cfs_dataset *ds, json_t *changes)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < ds->nmods; i++) {
        const cfs_modality *m = &ds->mods[i];
        json_t *doc = describe_anndata(m->root, m->n_obs);
        json_object_set_new(doc, "name", json_string(m->name));
        json_object_set_new(doc, "n_obs", json_integer((json_int_t)m->n_obs));
        json_object_set_new(doc, "n_vars", json_integer((json_int_t)m->n_vars));
        json_array_append_new(list, doc);
        char prefix[512];
        snprintf(prefix, sizeof prefix, "mod/%s", m->name);
        index_dtype_changes(m->root, prefix, changes);
    }
    return list;
}

static json_t *describe(const cfs_dataset *ds)
{
    json_t *left = json_array();
    for (size_t i = 0; i < ds->nleftout; i++)
        json_array_append_new(left, json_pack("{s:s, s:s}", "element", ds->leftout[i].element,
                                              "reason", ds->leftout[i].reason));
    json_t *doc = json_pack("{s:s, s:s?, s:n, s:I, s:I}", "format", ds->format, "version",
                            ds->format_version, "refused", "n_obs", (json_int_t)ds->n_obs,
                            "n_vars", (json_int_t)ds->n_vars);
    json_t *parts = describe_anndata(ds->root, ds->n_obs);
    json_object_update(doc, parts);
    json_decref(parts);
    json_object_set_new(doc, "left_out", left);
    json_t *changes = json_array();
    index_dtype_changes(ds->root, "", changes);
    if (ds->nmods)
        json_object_set_new(doc, "modalities", describe_modalities(ds, changes));
    json_object_set_new(doc, "index_dtype_changes", changes);
    return doc;
}

static cfs_isolation default_isolation(void)
{
    cfs_options defaults;
    cfs_options_init(&defaults);
    return cfs_options_isolation(&defaults);
}

/* One part of an input of several, read in a worker as the whole input is. */
static int open_isolated_part(const char *path, const char *part, cfs_dataset **ds,
                              cfs_err *err)
{
    cfs_isolation iso = default_isolation();
    return cfs_isolated_open_part(path, part, &iso, ds, NULL, err);
}

/* Read in a worker, as mount and export do (docs/design.md §2.4): a file that crashes its
 * reader is reported, not the end of inspect. */
static int open_isolated(const char *path, cfs_dataset **ds, cfs_reader_fault *fault,
                         cfs_err *err)
{
    cfs_isolation iso = default_isolation();
    return cfs_isolated_open(path, &iso, ds, fault, err);
}

/* The format a refused input was detected as, asked of a worker too: "" if none. */
static void detected_format(const char *path, char *name, size_t len)
{
    cfs_isolation iso = default_isolation();
    cfs_detector *d = cfs_detector_new(&iso);
    cfs_detection found = {0};
    if (d)
        cfs_detector_ask(d, path, &found);
    cfs_detector_free(d);
    snprintf(name, len, "%s", found.format);
}

/* A compressed copy a format reads only from disk, or a compressed input of a format that
 * reads it whole (R's), is decompressed into a temporary folder, removed again by close_input;
 * a URL not read in parts is fetched there first (§11). */
static int open_input(const char *path, cfs_dataset **ds, char *tmpdir, size_t len,
                      cfs_reader_fault *fault, cfs_err *err)
{
    const char *codec = NULL;
    tmpdir[0] = '\0';
    /* a compressed R file too: from its copy, its large vectors are not held in memory */
    bool from_copy = cfs_is_url(path) ? cfs_format_fetched_whole(path, &codec)
                                      : (cfs_format_reads_whole(path, &codec) && codec) ||
                                        cfs_format_needs_unpack(path, &codec);
    if (!from_copy)
        return open_isolated(path, ds, fault, err);
    const char *tmp = getenv("TMPDIR");
    snprintf(tmpdir, len, "%s/cellucid-fs-inspect-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmpdir)) {
        int rc = cfs_err_errno(err, errno, "cannot make a folder for its decompressed copy");
        tmpdir[0] = '\0';
        return rc;
    }
    char *copy = NULL;
    if (cfs_unpacked_in_folder(tmpdir, path, codec, NULL, &copy, err) < 0)
        return -1;
    int rc = open_isolated(copy, ds, fault, err);
    free(copy);
    return rc;
}

static void close_input(const char *tmpdir)
{
    if (!tmpdir[0])
        return;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
        cfs_unpacked_remove(path);    /* a URL's copy with the files beside it is a folder */
    }
    if (d)
        closedir(d);
    rmdir(tmpdir);
}

/* The published view a front end would serve beside the dataset (source, part), as inspect
 * shows it: null when there is none. */
static json_t *describe_view(const char *path, const char *part, bool refused)
{
    cfs_session view;
    cfs_err err = {0};
    json_t *j;
    if (cfs_session_look(NULL, path, part, &view, &err) < 0 ||
        cfs_session_take(&view, NULL, refused ? "its source is refused" : NULL, &err) < 0)
        j = json_pack("{s:s?, s:s}", "file", view.file, "refused", err.msg);
    else if (!view.file)
        j = json_null();
    else if (view.bytes)
        j = json_pack("{s:s, s:I, s:s}", "file", view.file, "bytes", (json_int_t)view.len,
                      "sha256", view.sha256);
    else
        j = json_pack("{s:s, s:s}", "file", view.file, "refused", view.refused);
    cfs_session_clear(&view);
    return j;
}

/* Each part of an input of several (an R workspace's objects): its name, class, and what it
 * becomes: a dataset (the id it asks for and its description, or why it is refused) or none
 * (why not). first is the part opened already (ds, from opened: the input or its copy) and
 * doc its description; the others are opened here. */
static json_t *describe_parts(const cfs_dataset *ds, const char *path, const char *opened,
                              const json_t *doc)
{
    json_t *list = json_array();
    bool named = cfs_dataset_part_datasets(ds) > 1;
    for (size_t k = 0; k < ds->nparts; k++) {
        const cfs_part *p = &ds->parts[k];
        json_t *o = json_pack("{s:s, s:s}", "name", p->name, "class", p->what);
        json_array_append_new(list, o);
        if (p->why_not) {
            json_object_set_new(o, "not_a_dataset", json_string(p->why_not));
            continue;
        }
        const char *part = named ? p->name : NULL;
        cfs_dataset *one = NULL;
        cfs_err err = {0};
        json_t *desc;
        if (k == ds->part) {
            one = (cfs_dataset *)ds;
            desc = json_deep_copy(doc);
        } else if (open_isolated_part(opened, p->name, &one, &err) == 0) {
            desc = describe(one);
        } else {
            desc = json_pack("{s:s?, s:n, s:s}", "format", ds->format, "version", "refused",
                             err.msg);
        }
        char *id = one ? cfs_identity_wanted_id(one, path, part) : NULL;
        json_object_set_new(o, "id", id ? json_string(id) : json_null());
        json_object_set_new(o, "dataset", desc);
        json_object_set_new(o, "session", describe_view(path, part, !one));
        free(id);
        if (one != ds)
            cfs_dataset_free(one);
    }
    return list;
}

json_t *cfs_inspect_file(const char *path)
{
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    json_t *doc;
    char tmpdir[4096];
    cfs_reader_fault fault = {0};
    if (open_input(path, &ds, tmpdir, sizeof tmpdir, &fault, &err) < 0) {
        /* A file whose open took the worker down is not probed again: it would only repeat. */
        char format[sizeof ((cfs_detection *)0)->format] = "";
        if (!fault.happened)
            detected_format(path, format, sizeof format);
        doc = json_pack("{s:s?, s:n, s:s}", "format", format[0] ? format : NULL, "version",
                        "refused", err.msg);
    } else {
        doc = describe(ds);
        if (doc && ds->nparts)
            json_object_set_new(doc, "objects", describe_parts(ds, path, ds->source, doc));
        cfs_dataset_free(ds);
    }
    close_input(tmpdir);
    if (doc && !json_object_get(doc, "objects"))
        json_object_set_new(doc, "session",
                            describe_view(path, NULL,
                                          json_is_string(json_object_get(doc, "refused"))));
    if (doc)
        json_object_set_new(doc, "path", json_string(path));
    return doc;
}

static void print_entries(FILE *out, const char *indent, const char *title, json_t *list)
{
    if (json_array_size(list) == 0)
        return;
    fprintf(out, "%s  %s:", indent, title);
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        json_t *name = json_object_get(e, "key") ? json_object_get(e, "key")
                                                 : json_object_get(e, "name");
        json_t *type = json_object_get(e, "encoding") ? json_object_get(e, "encoding")
                                                      : json_object_get(e, "type");
        fprintf(out, "%s %s (%s %s%s)", i ? "," : "", json_string_value(name),
                json_string_value(type),
                json_string_value(json_object_get(e, "dtype")) ?: "",
                json_is_true(json_object_get(e, "drawable")) ? ", drawable" : "");
    }
    fputc('\n', out);
}

/* X, the frames, the mappings, uns and raw of an AnnData's description, indented. */
static void print_anndata(FILE *out, json_t *doc, const char *indent)
{
    json_t *x = json_object_get(doc, "X");
    if (json_is_object(x))
        fprintf(out, "%s  X: %s %s\n", indent, json_string_value(json_object_get(x, "encoding")),
                json_string_value(json_object_get(x, "dtype")) ?: "");
    else
        fprintf(out, "%s  X: none\n", indent);
    static const char *const lists[] = {"obs", "var", "obsm", "varm", "obsp", "varp", "layers"};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        print_entries(out, indent, lists[i], json_object_get(doc, lists[i]));
    json_t *uns = json_object_get(doc, "uns");
    if (json_array_size(uns)) {
        fprintf(out, "%s  uns:", indent);
        size_t i;
        json_t *k;
        json_array_foreach(uns, i, k)
            fprintf(out, "%s %s", i ? "," : "", json_string_value(k));
        fputc('\n', out);
    }
    fprintf(out, "%s  raw: %s\n", indent, json_is_true(json_object_get(doc, "raw")) ? "yes" : "no");
}

/* A dataset's description (or its refusal), its lines indented by ind. */
static void print_dataset(FILE *out, json_t *doc, const char *ind)
{
    const char *refused = json_string_value(json_object_get(doc, "refused"));
    if (refused) {
        fprintf(out, "%s  refused: %s\n", ind, refused);
        return;
    }
    fprintf(out, "%s  format: %s (%s)\n", ind, json_string_value(json_object_get(doc, "format")),
            json_string_value(json_object_get(doc, "version")) ?: "?");
    fprintf(out, "%s  n_obs x n_vars: %lld x %lld\n", ind,
            (long long)json_integer_value(json_object_get(doc, "n_obs")),
            (long long)json_integer_value(json_object_get(doc, "n_vars")));
    print_anndata(out, doc, ind);
    size_t m;
    json_t *mod;
    char sub[64];
    snprintf(sub, sizeof sub, "%s  ", ind);
    json_array_foreach(json_object_get(doc, "modalities"), m, mod) {
        fprintf(out, "%s  modality %s: %lld x %lld\n", ind,
                json_string_value(json_object_get(mod, "name")),
                (long long)json_integer_value(json_object_get(mod, "n_obs")),
                (long long)json_integer_value(json_object_get(mod, "n_vars")));
        print_anndata(out, mod, sub);
    }
    size_t i;
    json_t *lo;
    json_array_foreach(json_object_get(doc, "left_out"), i, lo)
        fprintf(out, "%s  left out %s: %s\n", ind,
                json_string_value(json_object_get(lo, "element")),
                json_string_value(json_object_get(lo, "reason")));
    json_array_foreach(json_object_get(doc, "index_dtype_changes"), i, lo)
        fprintf(out, "%s  %s: indices %s and indptr %s in the source, both written as %s (one "
                "index dtype per sparse matrix, int32 where it fits)\n", ind,
                json_string_value(json_object_get(lo, "element")),
                json_string_value(json_object_get(lo, "indices")),
                json_string_value(json_object_get(lo, "indptr")),
                json_string_value(json_object_get(lo, "stored")));
}

/* A dataset's published view, when it has one. */
static void print_view(FILE *out, json_t *view, const char *ind)
{
    const char *file = json_string_value(json_object_get(view, "file"));
    if (!file)
        return;
    const char *refused = json_string_value(json_object_get(view, "refused"));
    if (refused)
        fprintf(out, "%s  session: %s: not listed: %s\n", ind, file, refused);
    else
        fprintf(out, "%s  session: %s (%lld bytes, sha256 %s)\n", ind, file,
                (long long)json_integer_value(json_object_get(view, "bytes")),
                json_string_value(json_object_get(view, "sha256")));
}

static void print_text(FILE *out, json_t *doc)
{
    fprintf(out, "%s\n", json_string_value(json_object_get(doc, "path")));
    json_t *objects = json_object_get(doc, "objects");
    if (!objects) {
        print_dataset(out, doc, "");
        print_view(out, json_object_get(doc, "session"), "");
        return;
    }
    /* an input of several parts: each, and what it becomes */
    size_t i;
    json_t *o;
    json_array_foreach(objects, i, o) {
        const char *id = json_string_value(json_object_get(o, "id"));
        fprintf(out, "  object %s (%s)", json_string_value(json_object_get(o, "name")),
                json_string_value(json_object_get(o, "class")));
        if (!json_object_get(o, "dataset"))
            fprintf(out, ": not a dataset: %s\n",
                    json_string_value(json_object_get(o, "not_a_dataset")));
        else if (id)
            fprintf(out, " -> %s.zarr\n", id);
        else
            fprintf(out, "\n");
        if (json_object_get(o, "dataset"))
            print_dataset(out, json_object_get(o, "dataset"), "  ");
        print_view(out, json_object_get(o, "session"), "  ");
    }
}

/* The input, or one of its parts, is refused. */
static bool any_refused(json_t *doc)
{
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(doc, "objects"), i, o)
        if (json_string_value(json_object_get(json_object_get(o, "dataset"), "refused")))
            return true;
    return json_string_value(json_object_get(doc, "refused")) != NULL;
}

int cfs_inspect(char *const *paths, int n, bool as_json, FILE *out)
{
    json_t *files = json_array();
    int rc = 0;
    for (int i = 0; i < n; i++) {
        json_t *doc = cfs_inspect_file(paths[i]);
        if (!doc)
            return 1;
        if (any_refused(doc))
            rc = 2;
        if (!as_json)
            print_text(out, doc);
        json_array_append_new(files, doc);
    }
    if (as_json) {
        json_t *top = json_pack("{s:o}", "files", files);
        json_dumpf(top, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', out);
        json_decref(top);
    } else {
        json_decref(files);
    }
    return rc;
}

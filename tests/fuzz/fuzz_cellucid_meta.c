/* What a source says about itself in uns['cellucid'] (src/catalog/cellucid_meta.c): the input is
 * that mapping as JSON, turned into the elements a reader gives (fuzz_uns_json.h) and put in
 * place of uns/cellucid of the fixture cellucid_meta/valid.h5ad, opened through the registry
 * for each input; then the dataset is checked as the catalog checks it. */
#include "cellucid_meta.h"
#include "format.h"
#include "fuzz_dir.h"
#include "fuzz_uns_json.h"

static int setup(void)
{
    return fuzz_dir_copy_fixture("cellucid_meta/valid.h5ad", "valid.h5ad");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *doc = fuzz_dir_ready(setup) ? json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL) : NULL;
    if (!doc)
        return 0;
    char path[1024];
    snprintf(path, sizeof path, "%s/valid.h5ad", fuzz_dir());
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    if (cfs_format_open(path, &ds, &err) == 0) {
        cfs_elem *uns = cfs_elem_ensure_dict(ds->root, "uns");
        cfs_elem *meta = uns ? fuzz_uns_from_json("cellucid", doc, 0) : NULL;
        if (uns)
            cfs_elem_remove(uns, "cellucid");
        if (meta && cfs_elem_add(uns, meta) < 0)
            cfs_elem_free(meta);
        cfs_cellucid_meta out = {0};
        cfs_cellucid_meta_check(ds, &out, &err);
        cfs_dataset_free(ds);
    }
    json_decref(doc);
    return 0;
}

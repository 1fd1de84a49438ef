/* src/catalog/: dataset ids, source stems and distinct ids in datasets.json. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "cellucid_text.h"
#include "identity.h"
#include "unit.h"

static void test_ids(void)
{
    CHECK(cfs_id_valid("pbmc"));
    CHECK(cfs_id_valid("a.b_c-1"));
    CHECK(!cfs_id_valid(""));
    CHECK(!cfs_id_valid("_x"));
    CHECK(!cfs_id_valid("x."));
    CHECK(!cfs_id_valid("a b"));
    char *id = cfs_id_from_name("Zelltyp \xc3\xa4 atlas");
    CHECK(strcmp(id, "Zelltyp___atlas") == 0);
    free(id);
    id = cfs_id_from_name("__.x.");
    CHECK(strcmp(id, "x") == 0);
    free(id);
    id = cfs_id_from_name("\xe7\xbb\x86");
    CHECK(strcmp(id, "dataset") == 0);
    free(id);
    char *stem = cfs_source_stem("/data/pbmc.h5ad");
    CHECK(strcmp(stem, "pbmc") == 0);
    free(stem);
    stem = cfs_source_stem("/data/run1/outs/");
    CHECK(strcmp(stem, "run1") == 0);
    free(stem);
    stem = cfs_source_stem("run/outs/per_sample_outs/s1/count");
    CHECK(strcmp(stem, "s1") == 0);
    free(stem);
    stem = cfs_source_stem("a.b.H5AD");
    CHECK(strcmp(stem, "a.b") == 0);
    free(stem);

    char *ids[3] = {strdup("a"), strdup("a"), strdup("a-2")};
    bool clashed[3];
    CHECK(cfs_catalog_distinct_ids(ids, 3, clashed) == 0);
    CHECK(strcmp(ids[0], "a") == 0 && strcmp(ids[1], "a-3") == 0 && strcmp(ids[2], "a-2") == 0);
    CHECK(!clashed[0] && clashed[1] && !clashed[2]);
    char *json = cfs_catalog_json(ids, 3);
    CHECK(json && strstr(json, "\"default\": \"a\"") && strstr(json, "\"path\": \"a-3.zarr/\""));
    CHECK(json && strstr(json, "a-2.zarr/") < strstr(json, "a-3.zarr/"));
    free(json);
    for (int i = 0; i < 3; i++)
        free(ids[i]);

    /* Suffixes skip what later sources want and what earlier ones were given. */
    const char *want[][6] = {{"a", "a", "a", "a-2", "b", "a-3"},
                             {"a", "a-4", "a-5", "a-2", "b", "a-3"}};
    char *more[6];
    bool more_clashed[6];
    for (int i = 0; i < 6; i++)
        more[i] = strdup(want[0][i]);
    CHECK(cfs_catalog_distinct_ids(more, 6, more_clashed) == 0);
    for (int i = 0; i < 6; i++) {
        CHECK(strcmp(more[i], want[1][i]) == 0);
        CHECK(more_clashed[i] == (i == 1 || i == 2));
        free(more[i]);
    }
    char *late[3] = {strdup("x-2"), strdup("x"), strdup("x")};
    CHECK(cfs_catalog_distinct_ids(late, 3, clashed) == 0);
    CHECK(strcmp(late[0], "x-2") == 0 && strcmp(late[1], "x") == 0 && strcmp(late[2], "x-3") == 0);
    for (int i = 0; i < 3; i++)
        free(late[i]);
}

static bool text_from_is(const char *bytes, const char *want)
{
    char *got = cfs_cellucid_text_from(bytes);
    bool same = want ? got && strcmp(got, want) == 0 : !got;
    free(got);
    return same;
}

/* A dataset named after a file whose name holds anything but '/' and NUL: text Cellucid takes. */
static void test_text_rule(void)
{
    CHECK(cfs_cellucid_text_ok("PBMC 3k", false) && !cfs_cellucid_text_ok("", false));
    CHECK(!cfs_cellucid_text_ok(" lead", false) && !cfs_cellucid_text_ok("trail\u00a0", false));
    CHECK(!cfs_cellucid_text_ok("new\nline", false) && !cfs_cellucid_text_ok("a\xe2\x80\x8b" "b", false));
    CHECK(!cfs_cellucid_text_ok("caf\xe9", false) && cfs_cellucid_text_ok("", true));
    CHECK(text_from_is("new\nline", "new line"));
    CHECK(text_from_is("\x1b[31mred", "[31mred"));
    CHECK(text_from_is("caf\xe9", "caf\xc3\xa9"));             /* Latin-1 */
    CHECK(text_from_is("\xe5\x90\x8d", "\xe5\x90\x8d"));      /* UTF-8 kept */
    CHECK(text_from_is("  a\tb\x7f ", "a b"));
    CHECK(text_from_is("a\xe2\x80\x8b", "a"));                 /* zero-width space at the end */
    CHECK(text_from_is("\x01\x02 ", NULL) && text_from_is("", NULL));
    char *long_name = cfs_cellucid_text_from("x/../y");
    CHECK(long_name && strcmp(long_name, "x/../y") == 0 && cfs_cellucid_text_ok(long_name, false));
    free(long_name);
}

void unit_catalog(void)
{
    test_ids();
    test_text_rule();
}

/* src/catalog/: dataset ids, source stems and distinct ids in datasets.json. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>
#include <sys/stat.h>

#include "catalog.h"
#include "cellucid_text.h"
#include "digest.h"
#include "identity.h"
#include "session.h"
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
    /* the folder holding what the datasets are named after (where their views lie) */
    const char *folders[][2] = {{"/data/run1/outs/", "/data"}, {"/data/pbmc.h5ad", "/data"},
                                {"pbmc.h5ad", "."}, {"/pbmc.h5ad", "/"}, {"run1/outs", "."},
                                {"r/outs/per_sample_outs/s1/count", "r/outs/per_sample_outs"}};
    for (size_t i = 0; i < sizeof folders / sizeof folders[0]; i++) {
        char *folder = cfs_source_naming_folder(folders[i][0]);
        CHECK(folder && strcmp(folder, folders[i][1]) == 0);
        free(folder);
    }

    char *ids[3] = {strdup("a"), strdup("a"), strdup("a-2")};
    bool clashed[3];
    CHECK(cfs_catalog_distinct_ids(ids, 3, clashed) == 0);
    CHECK(strcmp(ids[0], "a") == 0 && strcmp(ids[1], "a-3") == 0 && strcmp(ids[2], "a-2") == 0);
    CHECK(!clashed[0] && clashed[1] && !clashed[2]);
    cfs_catalog_entry listed[3] = {{ids[0], NULL, 0}, {ids[1], NULL, 0}, {ids[2], NULL, 0}};
    char *json = cfs_catalog_json(listed, 3, "");
    CHECK(json && strstr(json, "\"default\": \"a\"") && strstr(json, "\"path\": \"a-3.zarr/\""));
    CHECK(json && strstr(json, "a-2.zarr/") < strstr(json, "a-3.zarr/"));
    CHECK(json && !strstr(json, "session"));
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

/* The default: the one -o default names when listed, else the first id, said so. */
static void test_catalog_default_and_views(void)
{
    char sha[CFS_SHA256_HEX];
    cfs_sha256_hex("abc", 3, sha);
    CHECK(strcmp(sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    cfs_catalog_entry listed[3] = {{"b", sha, 3}, {"a", NULL, 0}, {"c", NULL, 0}};
    CHECK(strcmp(cfs_catalog_default(listed, 3, "c"), "c") == 0);
    CHECK(strcmp(cfs_catalog_default(listed, 3, "gone"), "a") == 0);
    CHECK(strcmp(cfs_catalog_default(listed, 3, ""), "a") == 0);
    CHECK(cfs_catalog_default(listed, 0, "x") == NULL);
    CHECK(cfs_catalog_default_note(listed, 3, "c") == NULL);
    CHECK(cfs_catalog_default_note(listed, 3, "") == NULL);
    char *note = cfs_catalog_default_note(listed, 3, "gone");
    CHECK(note && strcmp(note, "default=gone is not in datasets.json: it opens on a, the first "
                               "id") == 0);
    free(note);
    char *json = cfs_catalog_json(listed, 3, "c");
    const char *want =
        "{\n  \"schema\": 2,\n  \"default\": \"c\",\n  \"datasets\": [\n"
        "    {\n      \"id\": \"a\",\n      \"path\": \"a.zarr/\"\n    },\n"
        "    {\n      \"id\": \"b\",\n      \"path\": \"b.zarr/\",\n      \"session\": {\n"
        "        \"path\": \"b.cellucid-session\",\n        \"bytes\": 3,\n"
        "        \"sha256\": \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"\n"
        "      }\n    },\n"
        "    {\n      \"id\": \"c\",\n      \"path\": \"c.zarr/\"\n    }\n  ]\n}\n";
    CHECK(json && strcmp(json, want) == 0);
    free(json);
}

static unsigned char *session_bytes(const char *manifest, const char *const *chunks, size_t n,
                                    size_t *len)
{
    size_t m = strlen(manifest), total = 17 + 4 + m;
    for (size_t i = 0; i < n; i++)
        total += 4 + strlen(chunks[i]);
    unsigned char *b = malloc(total), *p = b;
    memcpy(p, "CELLUCID_SESSION\n", 17);
    p += 17;
    for (size_t i = 0; i <= n; i++) {
        size_t k = i == 0 ? m : strlen(chunks[i - 1]);
        const char *what = i == 0 ? manifest : chunks[i - 1];
        for (int j = 0; j < 4; j++)
            *p++ = (unsigned char)(k >> (8 * j));
        memcpy(p, what, k);
        p += k;
    }
    *len = total;
    return b;
}

/* Whether the session of this manifest and these chunks, cut short by `cut` bytes, has the
 * problem `want` (NULL: none; a string ending in '*' a problem starting so). */
static bool problem_is(const char *manifest, const char *const *chunks, size_t n, size_t cut,
                       const char *want)
{
    size_t len;
    unsigned char *b = session_bytes(manifest, chunks, n, &len);
    char why[256];
    const char *got = b && cut <= len ? cfs_session_format_problem(b, len - cut, why, sizeof why)
                                      : "no bytes";
    free(b);
    if (!want || !got)
        return want == got;
    size_t k = strlen(want);
    return want[k - 1] == '*' ? strncmp(got, want, k - 1) == 0 : strcmp(got, want) == 0;
}

/* The container every session file is: what is checked, and each way it can be wrong. */
static void test_session_format(void)
{
    const char *chunks[] = {"abc", "de"};
    const char *two = "{\"createdAt\":\"x\",\"chunks\":[{\"storedBytes\":3},{\"storedBytes\":2}]}";
    size_t all = 17 + 4 + strlen(two) + 4 + 3 + 4 + 2;
    CHECK(problem_is(two, chunks, 2, 0, NULL));
    CHECK(problem_is(two, chunks, 2, 1, "it ends inside chunk 1 (cut short?)"));
    CHECK(problem_is(two, chunks, 2, 2, "it ends inside chunk 1 (cut short?)"));
    CHECK(problem_is(two, chunks, 2, 6, "it ends before chunk 1 (cut short?)"));
    CHECK(problem_is(two, chunks, 2, all - 30, "it ends inside its manifest (cut short?)"));
    CHECK(problem_is(two, chunks, 2, all - 19, "it ends inside its header (cut short?)"));
    CHECK(problem_is(two, chunks, 2, all - 4, "it does not begin with CELLUCID_SESSION"));
    CHECK(problem_is("{\"chunks\":[{\"storedBytes\":3}]}", chunks, 2, 0,
                     "6 bytes follow its last chunk"));
    CHECK(problem_is("{\"chunks\":[{\"storedBytes\":4},{\"storedBytes\":2}]}", chunks, 2, 0,
                     "chunk 0 is framed as 3 bytes, its manifest says 4"));
    CHECK(problem_is("[1]", chunks, 0, 0, "its manifest is not a JSON object"));
    CHECK(problem_is("{\"chunks\":{}}", chunks, 0, 0, "its manifest has no chunks list"));
    CHECK(problem_is("{\"chunks\":[{}]}", chunks, 1, 0,
                     "chunk 0 of its manifest has no storedBytes"));
    CHECK(problem_is("{\"chunks\":[", chunks, 0, 0, "its manifest is not a JSON object"));
    CHECK(problem_is("", chunks, 0, 0, "its manifest length, 0 bytes, is not 1 byte to 16 MiB"));
    unsigned char magic_only[21] = "CELLUCID_SESSION\n\xff\xff\xff\xff";
    char why[256];
    CHECK(cfs_session_format_problem(magic_only, 21, why, sizeof why) &&
          strcmp(why, "its manifest length, 4294967295 bytes, is not 1 byte to 16 MiB") == 0);
    CHECK(cfs_session_format_problem((const unsigned char *)"PK\3\4", 4, why, sizeof why) &&
          strcmp(why, "it does not begin with CELLUCID_SESSION") == 0);
    CHECK(cfs_session_file_name("pbmc.cellucid-session"));
    CHECK(cfs_session_file_name(".cellucid-session"));
    CHECK(!cfs_session_file_name("pbmc.cellucid-session.bak"));
    CHECK(!cfs_session_file_name("pbmc.h5ad"));
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Where a dataset's view is looked for, beside the entry its name comes from. */
static void test_session_look(void)
{
    char tmpl[] = "/tmp/cfs-unit-session-XXXXXX";
    char *dir = unit_temp_dir(tmpl);
    if (!dir)
        return;
    char path[4096], run[4096];
    snprintf(run, sizeof run, "%s/run1", dir);
    CHECK(mkdir(run, 0755) == 0);
    write_text(dir, "pbmc.cellucid-session", "");
    write_text(dir, "run1.cellucid-session", "");
    write_text(dir, "two-a.cellucid-session", "");
    write_text(dir, "three.cellucid-session", "");
    cfs_err err;
    cfs_session s;
    snprintf(path, sizeof path, "%s/pbmc.h5ad.gz", dir);
    CHECK(cfs_session_look(dir, path, NULL, &s, &err) == 0 && s.file && !s.whole_input &&
          strstr(s.file, "/pbmc.cellucid-session") && s.version.st_size == 0);
    CHECK(cfs_session_take(&s, dir, NULL, &err) == 0 && !s.bytes && s.refused &&
          strstr(s.refused, "empty"));
    cfs_session_clear(&s);
    snprintf(path, sizeof path, "%s/run1/outs/", dir);
    CHECK(cfs_session_look(NULL, path, NULL, &s, &err) == 0 && s.file &&
          strcmp(s.file + strlen(dir), "/run1.cellucid-session") == 0);
    cfs_session_clear(&s);
    snprintf(path, sizeof path, "%s/two.RData", dir);
    CHECK(cfs_session_look(dir, path, "a", &s, &err) == 0 && s.file && !s.whole_input);
    cfs_session_clear(&s);
    CHECK(cfs_session_look(dir, path, "b", &s, &err) == 0 && !s.file);
    cfs_session_clear(&s);
    CHECK(cfs_session_look(dir, path, "x/y", &s, &err) == 0 && !s.file);
    cfs_session_clear(&s);
    snprintf(path, sizeof path, "%s/three.rda", dir);
    CHECK(cfs_session_look(dir, path, "a", &s, &err) == 0 && s.file && s.whole_input);
    CHECK(cfs_session_take(&s, dir, NULL, &err) == 0 && s.refused &&
          strstr(s.refused, "<input>-<object>.cellucid-session"));
    cfs_session_clear(&s);
    /* a NAME.url source: its view lies in the folder given; none without one */
    CHECK(cfs_session_look(dir, "https://h/x/pbmc.h5ad#pbmc.h5ad", NULL, &s, &err) == 0 &&
          s.file && strstr(s.file, "/pbmc.cellucid-session"));
    cfs_session_clear(&s);
    CHECK(cfs_session_look(NULL, "https://h/x/pbmc.h5ad", NULL, &s, &err) == 0 && !s.file);
    cfs_session_clear(&s);
    /* not read when the dataset is not listed */
    snprintf(path, sizeof path, "%s/pbmc.h5ad", dir);
    CHECK(cfs_session_look(dir, path, NULL, &s, &err) == 0 &&
          cfs_session_take(&s, dir, "its source is refused", &err) == 0 && !s.bytes &&
          strcmp(s.refused, "its source is refused") == 0);
    cfs_session_clear(&s);
    unit_remove_folder(dir);
}

void unit_catalog(void)
{
    test_ids();
    test_text_rule();
    test_catalog_default_and_views();
    test_session_format();
    test_session_look();
}

/* src/base/ (errors with status codes, paths, numbers, string sets, UTF-8) and the model's
 * construction helpers that every reader shares. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigmem.h"
#include "error.h"
#include "model.h"
#include "number.h"
#include "path.h"
#include "progress.h"
#include "strfmt.h"
#include "strlist.h"
#include "strset.h"
#include "unit.h"
#include "utf8.h"

static void test_error_status(void)
{
    cfs_err err = {0};
    CHECK(cfs_err_set(&err, "plain %d", 1) == -1 && err.status == CFS_EFAIL &&
          strcmp(err.msg, "plain 1") == 0);
    CHECK(cfs_err_oom(&err) == -1 && err.status == CFS_ENOMEM &&
          strcmp(err.msg, "out of memory") == 0);
    CHECK(cfs_err_setc(&err, CFS_EDAMAGED, "bad %s", "header") == -1 &&
          err.status == CFS_EDAMAGED && strcmp(err.msg, "bad header") == 0);
    /* A prefix adds context and keeps what kind of failure it was. */
    CHECK(cfs_err_prefix(&err, "x.h5ad") == -1 && err.status == CFS_EDAMAGED &&
          strcmp(err.msg, "x.h5ad: bad header") == 0);
    CHECK(cfs_err_errno(&err, ENOENT, "open %s", "a") == -1 && err.status == CFS_ENOTFOUND &&
          strncmp(err.msg, "open a: ", 8) == 0 && strstr(err.msg, strerror(ENOENT)));
    CHECK(cfs_err_errno(&err, EIO, "read") == -1 && err.status == CFS_EIO);
    CHECK(cfs_err_errno(&err, ENOMEM, "read") == -1 && err.status == CFS_ENOMEM);
    CHECK(cfs_err_errno(&err, ENOSPC, "write") == -1 && err.status == CFS_ENEVERFITS);
    CHECK(strcmp(cfs_status_name(CFS_ERETRY), "retry later") == 0);
    CHECK(strcmp(cfs_status_name(CFS_EREFUSED), "refused") == 0);
    CHECK(cfs_err_set(NULL, "ignored") == -1 && cfs_err_oom(NULL) == -1);
}

static bool joins_to(const char *a, const char *b, const char *want)
{
    char *got = cfs_path_join(a, b);
    bool ok = got && strcmp(got, want) == 0;
    free(got);
    return ok;
}

static void test_path_join(void)
{
    CHECK(joins_to("dir", "name", "dir/name"));
    CHECK(joins_to("dir/", "name", "dir/name"));
    CHECK(joins_to("/", "X", "/X"));
    CHECK(joins_to("", "obs", "obs"));
    CHECK(joins_to(NULL, "obs", "obs"));
    CHECK(joins_to("out", "", "out"));
    CHECK(joins_to("", "", ""));
    CHECK(joins_to("a/b", "c/d", "a/b/c/d"));
}

/* A mount's sources as its log and status.json name them: below SRC, never where SRC lies. */
static void test_path_shown(void)
{
    CHECK(strcmp(cfs_path_shown("/home/u/data", "/home/u/data/x.h5ad"), "x.h5ad") == 0);
    CHECK(strcmp(cfs_path_shown("/home/u/data", "/home/u/data/run/outs"), "run/outs") == 0);
    CHECK(strcmp(cfs_path_shown("/home/u/data", "/home/u/data"), "data") == 0);
    CHECK(strcmp(cfs_path_shown("/home/u/data", "/home/u/database.h5ad"),
                 "/home/u/database.h5ad") == 0);
    CHECK(strcmp(cfs_path_shown("/home/u/data", "/home/u/data/"), "/home/u/data/") == 0);
}

/* A folder's entries: sorted, hidden ones skipped; a missing folder is -1. */
static void test_path_list(void)
{
    char tmpl[] = "/tmp/cfs-unit-list-XXXXXX";
    char *dir = unit_temp_dir(tmpl);
    if (!dir)
        return;
    static const char *const make[] = {"b.csv", ".hidden", "a", "C"};
    for (size_t i = 0; i < 4; i++) {
        char *p = cfs_path_join(dir, make[i]);
        FILE *f = p ? fopen(p, "w") : NULL;
        CHECK(f != NULL);
        if (f)
            fclose(f);
        free(p);
    }
    char **names;
    size_t n;
    CHECK(cfs_path_list(dir, &names, &n) == 0 && n == 3 && strcmp(names[0], "C") == 0 &&
          strcmp(names[1], "a") == 0 && strcmp(names[2], "b.csv") == 0);
    if (n == 3)
        cfs_path_list_free(names, n);
    unit_remove_folder(dir);
    CHECK(cfs_path_list(dir, &names, &n) == -1 && n == 0 && names == NULL);
}

static void test_numbers(void)
{
    uint64_t u = 0;
    CHECK(cfs_parse_u64("0", &u) && u == 0);
    CHECK(cfs_parse_u64("007", &u) && u == 7);
    CHECK(cfs_parse_u64("18446744073709551615", &u) && u == UINT64_MAX);
    CHECK(!cfs_parse_u64("18446744073709551616", &u));
    CHECK(!cfs_parse_u64("", &u) && !cfs_parse_u64("-1", &u) && !cfs_parse_u64("+1", &u));
    CHECK(!cfs_parse_u64(" 7", &u) && !cfs_parse_u64("7 ", &u) && !cfs_parse_u64("0x10", &u));

    int64_t i = 0;
    CHECK(cfs_parse_i64("-9223372036854775808", &i) && i == INT64_MIN);
    CHECK(cfs_parse_i64("9223372036854775807", &i) && i == INT64_MAX);
    CHECK(!cfs_parse_i64("9223372036854775808", &i) && !cfs_parse_i64("-", &i));
    CHECK(cfs_parse_i64("+12", &i) && i == 12 && !cfs_parse_i64("1.0", &i));

    double d = 0;
    CHECK(cfs_parse_double("-1.5e3", true, &d) && d == -1500.0);
    CHECK(cfs_parse_double(".5", true, &d) && d == 0.5);
    CHECK(!cfs_parse_double("0x1p3", false, &d) && !cfs_parse_double("1.5x", false, &d));
    CHECK(!cfs_parse_double("", false, &d) && !cfs_parse_double(" 1", false, &d));
    CHECK(cfs_parse_double("nan", false, &d) && isnan(d) && !cfs_parse_double("nan", true, &d));
    CHECK(cfs_parse_double("-inf", false, &d) && isinf(d) && d < 0);
    CHECK(!cfs_parse_double("inf", true, &d) && !cfs_parse_double("1e999", true, &d));

    CHECK(cfs_parse_size("512", &u) && u == 512);
    CHECK(cfs_parse_size("4K", &u) && u == 4096 && cfs_parse_size("2m", &u) && u == 2 << 20);
    CHECK(cfs_parse_size("1G", &u) && u == UINT64_C(1) << 30);
    CHECK(!cfs_parse_size("M", &u) && !cfs_parse_size("1T", &u) && !cfs_parse_size("-1M", &u));
    CHECK(!cfs_parse_size("17179869184G", &u));

    const char *end = cfs_scan_u64("12.3", true, &u);
    CHECK(end && *end == '.' && u == 12);
    CHECK(cfs_scan_u64("01", true, &u) == NULL);
    CHECK((end = cfs_scan_u64("0.1", true, &u)) && *end == '.' && u == 0);
    CHECK((end = cfs_scan_u64("01", false, &u)) && *end == '\0' && u == 1);
    CHECK(cfs_scan_u64("x", false, &u) == NULL);
}

static void test_strdupf(void)
{
    char *s = cfs_strdupf("%s: line %llu", "clusters.csv", 12ULL);
    CHECK(s && strcmp(s, "clusters.csv: line 12") == 0);
    free(s);
    s = cfs_strdupf("%s", "");
    CHECK(s && s[0] == '\0');
    free(s);
}

static void test_strlist(void)
{
    cfs_strlist l = {0};
    int pushed = 0;
    for (int i = 0; i < 100; i++)
        pushed += cfs_strlist_push(&l, cfs_strdupf("line %d", i)) == 0;
    CHECK(pushed == 100 && l.n == 100 && strcmp(l.v[0], "line 0") == 0 &&
          strcmp(l.v[99], "line 99") == 0);
    /* A caller's failed allocation is refused, and nothing is appended. */
    CHECK(cfs_strlist_push(&l, NULL) == -1 && l.n == 100);
    cfs_strlist_free(&l);
    CHECK(l.n == 0 && l.v == NULL && l.cap == 0);
    cfs_strlist_free(&l);
}

static void test_strset(void)
{
    cfs_strset *set = cfs_strset_new(0);
    CHECK(set != NULL);
    if (!set)
        return;
    enum { N = 5000 };
    static char names[N][16];
    int added = 0;
    for (int k = 0; k < N; k++) {
        snprintf(names[k], sizeof names[k], "cell-%d", k);
        added += cfs_strset_add(set, names[k], (uint64_t)k) == 1;
    }
    CHECK(added == N && cfs_strset_len(set) == N);
    /* A repeat is reported and keeps the first value. */
    CHECK(cfs_strset_add(set, "cell-17", 99) == 0);
    uint64_t *v = cfs_strset_get(set, "cell-17");
    CHECK(v && *v == 17);
    int found = 0;
    for (int k = 0; k < N; k++) {
        uint64_t *got = cfs_strset_get(set, names[k]);
        found += got && *got == (uint64_t)k;
    }
    CHECK(found == N);
    CHECK(cfs_strset_get(set, "cell-5000") == NULL && cfs_strset_get(set, "") == NULL);
    CHECK(cfs_strset_add(set, "", 7) == 1 && (v = cfs_strset_get(set, "")) && *v == 7);
    if ((v = cfs_strset_get(set, "cell-1")))
        (*v)++;
    CHECK((v = cfs_strset_get(set, "cell-1")) && *v == 2);
    cfs_strset_free(set);
    cfs_strset_free(NULL);
}

static void test_utf8_valid(void)
{
    const unsigned char *u = (const unsigned char *)"cell_000123-AACGT";
    CHECK(cfs_utf8_valid(u, 17) && cfs_utf8_valid(u, 0));
    CHECK(cfs_utf8_valid((const unsigned char *)"barcode_\xe7\xbb\x86\xe8\x83\x9e!", 15));
    CHECK(!cfs_utf8_valid((const unsigned char *)"barcode_\xc0\xaf", 10));     /* overlong */
    CHECK(!cfs_utf8_valid((const unsigned char *)"\xed\xa0\x80", 3));           /* surrogate */
    CHECK(!cfs_utf8_valid((const unsigned char *)"abcdefghi\xe7\xbb", 11));     /* truncated */
    CHECK(!cfs_utf8_valid((const unsigned char *)"abcdefgh\xff" "abcdefgh", 17));  /* Latin-1 */
}

/* Two jobs of one source at once: it works until the last one ends, showing the job that
 * reported last. */
static void test_progress(void)
{
    cfs_progress *p = cfs_progress_new("/data/a.h5ad", NULL);
    char element[64];
    double f = -1;
    CHECK(p && !cfs_progress_get(p, element, sizeof element, &f));
    cfs_progress_begin(p, "X");
    cfs_progress_begin(p, "layers/counts");
    cfs_progress_note(p, "X", 0.25);
    CHECK(cfs_progress_get(p, element, sizeof element, &f) && strcmp(element, "X") == 0 &&
          f == 0.25);
    cfs_progress_end(p, "X");
    cfs_progress_note(p, "layers/counts", 0.5);
    CHECK(cfs_progress_get(p, element, sizeof element, &f) &&
          strcmp(element, "layers/counts") == 0 && f == 0.5);
    cfs_progress_end(p, "layers/counts");
    CHECK(!cfs_progress_get(p, element, sizeof element, &f));
    cfs_progress_free(p);
}

static void test_utf8_put(void)
{
    static const uint32_t cps[] = {0x24, 0x7f, 0x80, 0xa2, 0x7ff, 0x800, 0x20ac, 0xfffd,
                                   0x10000, 0x10348, 0x10ffff};
    static const size_t lens[] = {1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4};
    int round = 0;
    for (size_t k = 0; k < sizeof cps / sizeof cps[0]; k++) {
        char buf[4];
        uint32_t back = 0;
        size_t n = cfs_utf8_put(buf, cps[k]);
        round += n == lens[k] && cfs_utf8_decode((unsigned char *)buf, n, &back) == n &&
                 back == cps[k];
    }
    CHECK(round == (int)(sizeof cps / sizeof cps[0]));
    char buf[4];
    CHECK(cfs_utf8_put(buf, 0xd800) == 0 && cfs_utf8_put(buf, 0xdfff) == 0);
    CHECK(cfs_utf8_put(buf, 0x110000) == 0);
    CHECK(cfs_utf8_put(buf, 0x20ac) == 3 && memcmp(buf, "\xe2\x82\xac", 3) == 0);
}

static void test_text_to_utf8(void)
{
    char *s = cfs_text_to_utf8("caf\xc3\xa9", 5);
    CHECK(s && strcmp(s, "caf\xc3\xa9") == 0);
    free(s);
    /* Not UTF-8: every byte is Latin-1, so 0xe9 is U+00E9 and 0xff U+00FF. */
    s = cfs_text_to_utf8("caf\xe9 \xff", 6);
    CHECK(s && strcmp(s, "caf\xc3\xa9 \xc3\xbf") == 0);
    free(s);
    s = cfs_text_to_utf8("ab\0cd", 2);
    CHECK(s && strcmp(s, "ab") == 0);
    free(s);
    s = cfs_text_to_utf8("", 0);
    CHECK(s && s[0] == '\0');
    free(s);
}

static bool shown_as(const char *text, const char *want)
{
    char *s = cfs_text_shown(text);
    bool same = s && strcmp(s, want) == 0;
    free(s);
    return same;
}

/* What a log line and status.json show of any bytes: UTF-8 kept, the rest written out. */
static void test_text_shown(void)
{
    CHECK(shown_as("pbmc.h5ad", "pbmc.h5ad") && shown_as("", ""));
    CHECK(shown_as("\xe5\x90\x8d \xc3\xa9", "\xe5\x90\x8d \xc3\xa9"));
    CHECK(shown_as("new\nline\t\x7f", "new\\x0Aline\\x09\\x7F"));
    CHECK(shown_as("caf\xe9.h5ad", "caf\\xE9.h5ad"));
    CHECK(shown_as("\x1b[2J", "\\x1B[2J"));
    CHECK(shown_as("c1 \xc2\x85", "c1 \\xC2\\x85"));           /* U+0085, a C1 control */
    CHECK(shown_as("cut \xe2\x82", "cut \\xE2\\x82"));         /* a sequence cut short */
}

static void count_free(void *reader)
{
    (*(int *)reader)++;
}

static void test_model_construction(void)
{
    cfs_err err = {0};
    cfs_elem *parent = cfs_elem_new(CFS_EL_DICT, "uns");
    CHECK(parent != NULL);
    if (!parent)
        return;
    /* A reader's failed allocation (a NULL child) is out of memory, and nothing is appended. */
    CHECK(cfs_elem_add_or_free(parent, NULL, &err) == -1 && err.status == CFS_ENOMEM &&
          parent->nchildren == 0);
    uint64_t shape[1] = {3};
    double *values = malloc(3 * sizeof *values);
    cfs_array *arr = values ? cfs_array_from_memory(CFS_FLOAT64, 1, shape, values) : NULL;
    CHECK(arr != NULL);
    cfs_elem *el = cfs_elem_from_array(CFS_EL_ARRAY, "x", arr);
    CHECK(el && el->values == arr && strcmp(el->name, "x") == 0);
    CHECK(cfs_elem_add_or_free(parent, el, &err) == 0 && parent->nchildren == 1 &&
          cfs_elem_child(parent, "x") == el);
    CHECK(cfs_elem_from_array(CFS_EL_ARRAY, "none", NULL) == NULL);
    cfs_elem_free(parent);

    /* The dataset owns its strings and frees what its reader keeps open, once. */
    cfs_dataset *ds = cfs_dataset_new("/data/a.h5ad");
    CHECK(ds && ds->format == NULL && strcmp(ds->source, "/data/a.h5ad") == 0);
    int freed = 0;
    if (ds) {
        ds->format = strdup("h5ad");
        ds->no_embedding_hint = strdup("open its outs/ folder");
        ds->reader = &freed;
        ds->reader_free = count_free;
    }
    cfs_dataset_free(ds);
    CHECK(freed == 1);
}

/* Whether the smaps entry holding addr says its pages may be huge; -1 if it cannot tell
 * (no smaps, or a kernel without THP). */
static int huge_eligible(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    bool inside = false;
    int eligible = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
        else if (inside && sscanf(line, "THPeligible: %d", &eligible) == 1)
            break;
    }
    fclose(f);
    return eligible;
}

/* A big buffer asks for huge pages, a small one does not (it shares the heap's pages). */
static void test_big_alloc(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char mode[128] = "";
    if (f) {
        if (!fgets(mode, sizeof mode, f))
            mode[0] = '\0';
        fclose(f);
    }
    size_t len = CFS_BIGMEM_HUGE * 2;
    unsigned char *big = cfs_big_alloc(len), *small = cfs_big_alloc(4096);
    CHECK(big && small);
    if (big && small) {
        memset(big, 1, len);
        memset(small, 1, 4096);
        if (strstr(mode, "[madvise]")) {    /* where the advice is what decides */
            CHECK(huge_eligible(big + len / 2) == 1);
            CHECK(huge_eligible(small) == 0);
        }
    }
    free(big);
    free(small);
}

void unit_base(void)
{
    test_error_status();
    test_path_join();
    test_path_shown();
    test_path_list();
    test_numbers();
    test_strdupf();
    test_strlist();
    test_strset();
    test_utf8_valid();
    test_progress();
    test_utf8_put();
    test_text_to_utf8();
    test_text_shown();
    test_model_construction();
    test_big_alloc();
}

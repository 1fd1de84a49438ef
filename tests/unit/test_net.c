/* src/net: the parts of S3 that need no server (URLs, credentials files, listing pages). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "digest.h"
#include "format.h"
#include "http.h"
#include "remote.h"
#include "s3.h"
#include "unit.h"

static void test_url_parse(void)
{
    cfs_err err = {0};
    char *bucket, *key;
    CHECK(cfs_s3_url_parse("s3://my-bucket/a/b/", &bucket, &key, &err) == 0);
    CHECK(bucket && strcmp(bucket, "my-bucket") == 0);
    CHECK(key && strcmp(key, "a/b/") == 0);
    free(bucket);
    free(key);
    CHECK(cfs_s3_url_parse("s3://my.bucket", &bucket, &key, &err) == 0);
    CHECK(bucket && strcmp(bucket, "my.bucket") == 0 && key && key[0] == '\0');
    free(bucket);
    free(key);
    CHECK(cfs_s3_url_parse("s3://ab/x", &bucket, &key, &err) < 0);
    CHECK(err.status == CFS_EINVALID && strstr(err.msg, "s3://ab/x"));
    CHECK(cfs_s3_url_parse("s3:///x", &bucket, &key, &err) < 0);
    CHECK(cfs_s3_url_parse("s3://bad bucket/x", &bucket, &key, &err) < 0);
    CHECK(cfs_s3_url_parse("/tmp/out", &bucket, &key, &err) < 0);
    CHECK(cfs_s3_is_url("s3://b") && !cfs_s3_is_url("/s3://b"));
}

static void test_object_url(void)
{
    cfs_s3_config cfg = {0};
    strcpy(cfg.region, "eu-west-1");
    char *url = cfs_s3_object_url(&cfg, "bkt", "p/a b+c.zarr/.zattrs", NULL);
    CHECK(url && strcmp(url, "https://bkt.s3.eu-west-1.amazonaws.com/p/a%20b%2Bc.zarr/.zattrs")
                     == 0);
    free(url);
    strcpy(cfg.endpoint, "http://127.0.0.1:7480");
    url = cfs_s3_object_url(&cfg, "bkt", "", "list-type=2");
    CHECK(url && strcmp(url, "http://127.0.0.1:7480/bkt/?list-type=2") == 0);
    free(url);
    char *q = cfs_http_escape("a/b~c=d&e", false);
    CHECK(q && strcmp(q, "a%2Fb~c%3Dd%26e") == 0);
    free(q);
}

static void test_config_endpoint(void)
{
    cfs_s3_config cfg;
    cfs_err err = {0};
    CHECK(cfs_s3_config_load(&cfg, "ftp://host", &err) < 0 && strstr(err.msg, "ftp://host"));
}

static void test_creds_parse(void)
{
    const char *text = "# comment\n"
                       "[default]\n"
                       "aws_access_key_id = AKIDEFAULT\n"
                       "aws_secret_access_key=secret/default\n"
                       "\n"
                       "[profile lab]\r\n"
                       "  aws_access_key_id =  AKILAB  \r\n"
                       "aws_secret_access_key = s3cr3t=\r\n"
                       "aws_session_token = TOKEN\r\n"
                       "[empty]\n"
                       "region = us-east-1\n";
    cfs_s3_creds c;
    cfs_err err = {0};
    CHECK(cfs_s3_creds_parse(text, "default", &c, &err) == 0);
    CHECK(strcmp(c.access_key, "AKIDEFAULT") == 0 && strcmp(c.secret_key, "secret/default") == 0);
    CHECK(c.session_token[0] == '\0');
    CHECK(cfs_s3_creds_parse(text, "lab", &c, &err) == 0);
    CHECK(strcmp(c.access_key, "AKILAB") == 0 && strcmp(c.secret_key, "s3cr3t=") == 0);
    CHECK(strcmp(c.session_token, "TOKEN") == 0);
    CHECK(cfs_s3_creds_parse(text, "empty", &c, &err) < 0 && err.status == CFS_ENOTFOUND);
    CHECK(cfs_s3_creds_parse(text, "none", &c, &err) < 0 && strstr(err.msg, "[none]"));
}

static void test_listing_parse(void)
{
    const char *page1 =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult "
        "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
        "<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
        "<Contents><Key>p/z.zarr/.zattrs</Key><Size>2</Size>"
        "<ETag>&quot;99914b932bd37a50b983c5e7c90ae93b&quot;</ETag></Contents>"
        "<Contents><Key>p/a%20b%2Bc+d</Key><Size>5</Size><ETag>\"abc-2\"</ETag></Contents>"
        "<NextContinuationToken>tok&amp;1</NextContinuationToken></ListBucketResult>";
    const char *page2 = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                        "<Contents><Key>p/m</Key><Size>0</Size></Contents></ListBucketResult>";
    cfs_s3_listing l = {0};
    cfs_err err = {0};
    char *next = NULL;
    CHECK(cfs_s3_listing_parse(page1, strlen(page1), &l, &next, &err) == 0);
    CHECK(next && strcmp(next, "tok&1") == 0);
    free(next);
    CHECK(cfs_s3_listing_parse(page2, strlen(page2), &l, &next, &err) == 0 && next == NULL);
    cfs_s3_listing_sort(&l);
    CHECK(l.n == 3);
    const cfs_s3_object *o = cfs_s3_listing_find(&l, "p/z.zarr/.zattrs");
    CHECK(o && o->size == 2 && strcmp(o->etag, "99914b932bd37a50b983c5e7c90ae93b") == 0);
    o = cfs_s3_listing_find(&l, "p/a b+c d");
    CHECK(o && o->size == 5 && strcmp(o->etag, "abc-2") == 0);
    CHECK(cfs_s3_listing_find(&l, "p/m") && !cfs_s3_listing_find(&l, "p/n"));
    cfs_s3_listing_free(&l);
    CHECK(cfs_s3_listing_parse("<Error/>", 8, &l, &next, &err) < 0);
    const char *cut = "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>";
    CHECK(cfs_s3_listing_parse(cut, strlen(cut), &l, &next, &err) < 0);
    cfs_s3_listing_free(&l);
}

static void test_digests(void)
{
    char md5[CFS_MD5_HEX], sha[CFS_SHA256_HEX];
    cfs_md5_hex("{}", 2, md5);
    CHECK(strcmp(md5, "99914b932bd37a50b983c5e7c90ae93b") == 0);
    cfs_sha256_hex("", 0, sha);
    CHECK(strcmp(sha, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
}

/* A fake server for base's URL sources: the keys it has (an ETag each), and the URLs asked. */
static const char *fake_have[8];
static const char *fake_etag = "e1";
static char fake_asked[4096];

static int fake_info(void *ctx, const char *url, cfs_remote_info *out, cfs_err *err)
{
    (void)ctx;
    strncat(fake_asked, url, sizeof fake_asked - strlen(fake_asked) - 2);
    strcat(fake_asked, " ");
    size_t len = strcspn(url, "#");       /* what is sent */
    for (size_t i = 0; i < 8 && fake_have[i]; i++)
        if (strlen(fake_have[i]) == len && strncmp(url, fake_have[i], len) == 0) {
            *out = (cfs_remote_info){.size = 10 + i};
            snprintf(out->version, sizeof out->version, "%s-%zu", fake_etag, i);
            return 0;
        }
    return cfs_err_setc(err, CFS_ENOTFOUND, "HTTP 404: the server has no such file");
}

static void fake_server(const cfs_url_shapes *shapes, const char *const *have)
{
    memset(fake_have, 0, sizeof fake_have);
    for (size_t i = 0; have[i]; i++)
        fake_have[i] = have[i];
    fake_asked[0] = '\0';
    cfs_remote_ops ops = {.info = fake_info, .shapes = shapes};
    cfs_remote_set_ops(&ops);
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* Base knows no format's names: the folder suffixes and version keys are what it is handed. A
 * Zarr v3 folder's poll asks zarr.json, not .zmetadata first each time. */
static void test_url_shapes(void)
{
    static const char *const suffixes[] = {".store", NULL};
    static const char *const keys[] = {"v2.json", "v3.json", NULL};
    cfs_url_shapes shapes = {suffixes, keys, NULL};
    fake_server(&shapes, (const char *const[]){"https://h/x.store/v3.json", NULL});
    CHECK(cfs_url_is_folder("https://h/x.STORE") && !cfs_url_is_folder("https://h/x.zarr"));
    struct stat st, again;
    CHECK(cfs_source_stat("https://h/x.store", &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(st.st_size == 10);
    CHECK(cfs_source_stat("https://h/x.store", &again) == 0 && again.st_ino == st.st_ino);
    CHECK(count_of(fake_asked, "/v2.json") == 1 && count_of(fake_asked, "/v3.json") == 2);
    cfs_remote_set_ops(&(cfs_remote_ops){0});
}

/* A MatrixMarket matrix over a URL: its members are the lists its reader finds (a 404 skips
 * one), its version all of theirs; a missing cell list is the refusal, naming what was looked
 * for. */
static void test_url_members(void)
{
    const cfs_url_shapes *shapes = cfs_format_url_shapes();
    const char *const have[] = {"https://h/d/GSM1_a_matrix.mtx.gz",
                                "https://h/d/GSM1_a_barcodes.tsv.gz",
                                "https://h/d/GSM1_a_genes.tsv", NULL};
    fake_server(shapes, have);
    cfs_url_member *m;
    size_t n;
    cfs_err err = {0};
    CHECK(cfs_url_members("https://h/d/GSM1_a_matrix.mtx.gz#a", &m, &n, &err) == 1 && n == 3);
    CHECK(n == 3 && strcmp(m[0].key, "GSM1_a_matrix.mtx.gz") == 0 &&
          strcmp(m[1].key, "GSM1_a_barcodes.tsv.gz") == 0 &&
          strcmp(m[2].key, "GSM1_a_genes.tsv") == 0 &&
          strcmp(m[2].url, "https://h/d/GSM1_a_genes.tsv") == 0);
    cfs_url_members_free(m, n);
    struct stat st, changed;
    CHECK(cfs_source_stat("https://h/d/GSM1_a_matrix.mtx.gz", &st) == 0 && st.st_size == 33);
    fake_etag = "e2";
    CHECK(cfs_source_stat("https://h/d/GSM1_a_matrix.mtx.gz", &changed) == 0);
    CHECK(changed.st_ino != st.st_ino);
    fake_etag = "e1";
    CHECK(cfs_url_members("https://h/d/x.h5ad", &m, &n, &err) == 0 && n == 0);
    CHECK(cfs_url_members("https://h/d/GSM2_b_matrix.mtx.gz", &m, &n, &err) == 0);  /* 404 */
    fake_server(shapes, (const char *const[]){"https://h/e/GSM1_a_matrix.mtx.gz",
                                              "https://h/e/GSM1_a_features.tsv.gz", NULL});
    CHECK(cfs_url_members("https://h/e/GSM1_a_matrix.mtx.gz", &m, &n, &err) == -1);
    CHECK(strstr(err.msg, "GSM1_a_barcodes.tsv[.gz]") && strstr(err.msg, "cell list"));
    /* a folder URL: Zarr's keys first, then the layouts' matrices */
    fake_server(shapes, (const char *const[]){"https://h/f/matrix.mtx.gz",
                                              "https://h/f/barcodes.tsv.gz",
                                              "https://h/f/features.tsv.gz", NULL});
    CHECK(cfs_url_members("https://h/f/", &m, &n, &err) == 1 && n == 3);
    CHECK(n == 3 && strcmp(m[0].key, "matrix.mtx.gz") == 0);
    cfs_url_members_free(m, n);
    CHECK(cfs_source_stat("https://h/f/", &st) == 0 && S_ISDIR(st.st_mode) && st.st_size == 33);
    cfs_remote_set_ops(&(cfs_remote_ops){0});
}

/* Folder URLs (a Zarr store read key by key) and what a reader worker may ask of one. */
static void test_folder_urls(void)
{
    cfs_remote_set_ops(&(cfs_remote_ops){.shapes = cfs_format_url_shapes()});
    CHECK(cfs_url_is_folder("https://h/x.zarr") && cfs_url_is_folder("http://h/a/x.ZARR/"));
    CHECK(cfs_url_is_folder("https://h/x.zarr#name") && cfs_url_is_folder("https://h/d/"));
    CHECK(!cfs_url_is_folder("https://h/x.zarr.zip") && !cfs_url_is_folder("/local/x.zarr"));
    CHECK(!cfs_url_is_folder("https://h/x.h5ad?x.zarr"));
    char *c = cfs_url_child("https://h/x.zarr/#pbmc", "X/0.0");
    CHECK(c && strcmp(c, "https://h/x.zarr/X/0.0") == 0);
    free(c);
    const char *src = "https://h/x.zarr#pbmc";
    CHECK(cfs_url_within("https://h/x.zarr/obs/.zattrs", src));
    CHECK(cfs_url_within(src, src));
    CHECK(!cfs_url_within("https://h/x.zarr/../secret", src));
    CHECK(!cfs_url_within("https://h/x.zarr/a/./b", src));
    CHECK(!cfs_url_within("https://h/x.zarr/a?b", src));
    CHECK(!cfs_url_within("https://h/x.zarr/", src));
    CHECK(!cfs_url_within("https://h/x.zarrX/a", src));
    CHECK(!cfs_url_within("https://h/x.h5ad/a", "https://h/x.h5ad"));
    cfs_remote_set_ops(&(cfs_remote_ops){0});
}

void unit_net(void)
{
    test_folder_urls();
    test_url_shapes();
    test_url_members();
    test_url_parse();
    test_object_url();
    test_config_endpoint();
    test_creds_parse();
    test_listing_parse();
    test_digests();
}

/* ListObjectsV2 pages: the XML S3 answers a listing with, read as far as a listing needs. */
#include "s3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text between <tag> and </tag> in [p, end), or NULL; *after is past the closing tag. */
static const char *element(const char *p, const char *end, const char *tag, size_t *len,
                           const char **after)
{
    char open[48], close[48];
    size_t olen = (size_t)snprintf(open, sizeof open, "<%s>", tag);
    size_t clen = (size_t)snprintf(close, sizeof close, "</%s>", tag);
    const char *a = memmem(p, (size_t)(end - p), open, olen);
    if (!a)
        return NULL;
    a += olen;
    const char *b = memmem(a, (size_t)(end - a), close, clen);
    if (!b)
        return NULL;
    *len = (size_t)(b - a);
    if (after)
        *after = b + clen;
    return a;
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* XML's five entities undone (numeric ones are not in what S3 sends for url-encoded keys and
 * ETags), then, when url is set, %XX and '+' (a space). */
static char *decode(const char *s, size_t len, bool url)
{
    static const struct { const char *name; char c; } entities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''},
    };
    char *out = malloc(len + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len;) {
        size_t k = 0, n = sizeof entities / sizeof entities[0];
        while (k < n && strncmp(s + i, entities[k].name, strlen(entities[k].name)) != 0)
            k++;
        if (s[i] == '&' && k < n) {
            *o++ = entities[k].c;
            i += strlen(entities[k].name);
        } else {
            *o++ = s[i++];
        }
    }
    *o = '\0';
    if (!url)
        return out;
    o = out;
    for (const char *p = out; *p; p++) {
        int hi, lo;
        if (*p == '%' && (hi = hex_value(p[1])) >= 0 && (lo = hex_value(p[2])) >= 0) {
            *o++ = (char)(hi << 4 | lo);
            p += 2;
        } else {
            *o++ = *p == '+' ? ' ' : *p;
        }
    }
    *o = '\0';
    return out;
}

static int append(cfs_s3_listing *out, const char *p, const char *end, bool url, cfs_err *err)
{
    size_t klen, slen, elen;
    const char *key = element(p, end, "Key", &klen, NULL);
    const char *size = element(p, end, "Size", &slen, NULL);
    const char *etag = element(p, end, "ETag", &elen, NULL);
    if (!key || !size)
        return cfs_err_setc(err, CFS_EIO, "a listing entry without Key or Size");
    cfs_s3_object *grown = realloc(out->items, (out->n + 1) * sizeof *grown);
    if (!grown)
        return cfs_err_oom(err);
    out->items = grown;
    cfs_s3_object *o = &out->items[out->n];
    memset(o, 0, sizeof *o);
    if (!(o->key = decode(key, klen, url)))
        return cfs_err_oom(err);
    out->n++;
    o->size = strtoull(size, NULL, 10);
    char *tag = etag ? decode(etag, elen, false) : NULL;
    const char *t = tag ? tag : "";
    size_t tlen = strlen(t);
    if (tlen >= 2 && t[0] == '"' && t[tlen - 1] == '"') {
        t++;
        tlen -= 2;
    }
    snprintf(o->etag, sizeof o->etag, "%.*s", (int)tlen, t);
    free(tag);
    return 0;
}

int cfs_s3_listing_parse(const char *xml, size_t len, cfs_s3_listing *out, char **next,
                         cfs_err *err)
{
    *next = NULL;
    const char *p = xml ? xml : "", *end = p + (xml ? len : 0);
    if (!memmem(p, (size_t)(end - p), "<ListBucketResult", 17))
        return cfs_err_setc(err, CFS_EIO, "the server's answer is not a ListObjectsV2 result");
    size_t n;
    const char *enc = element(p, end, "EncodingType", &n, NULL);
    bool url = enc && n == 3 && strncmp(enc, "url", 3) == 0;
    const char *item, *after = p;
    while ((item = element(after, end, "Contents", &n, &after)))
        if (append(out, item, item + n, url, err) < 0)
            return -1;
    const char *trunc = element(p, end, "IsTruncated", &n, NULL);
    if (trunc && n == 4 && strncmp(trunc, "true", 4) == 0) {
        const char *tok = element(p, end, "NextContinuationToken", &n, NULL);
        if (!tok || n == 0)
            return cfs_err_setc(err, CFS_EIO, "a truncated listing without a continuation token");
        if (!(*next = decode(tok, n, false)))
            return cfs_err_oom(err);
    }
    return 0;
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const cfs_s3_object *)a)->key, ((const cfs_s3_object *)b)->key);
}

void cfs_s3_listing_sort(cfs_s3_listing *out)
{
    if (out->n > 1)
        qsort(out->items, out->n, sizeof *out->items, by_key);
}

const cfs_s3_object *cfs_s3_listing_find(const cfs_s3_listing *l, const char *key)
{
    cfs_s3_object probe = {.key = (char *)key};
    return l->n ? bsearch(&probe, l->items, l->n, sizeof *l->items, by_key) : NULL;
}

void cfs_s3_listing_free(cfs_s3_listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i].key);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

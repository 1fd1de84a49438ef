/* s3:// URLs, credentials and endpoints: the pure parts of talking to S3 (unit-tested). */
#include "s3.h"
#include "http.h"
#include "path.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cfs_s3_is_url(const char *s)
{
    return strncmp(s, "s3://", 5) == 0;
}

static bool bucket_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '-' || c == '_';
}

int cfs_s3_url_parse(const char *url, char **bucket, char **key, cfs_err *err)
{
    *bucket = *key = NULL;
    if (!cfs_s3_is_url(url))
        return cfs_err_setc(err, CFS_EINVALID, "%s: not an s3:// URL (s3://bucket/prefix/)", url);
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t blen = slash ? (size_t)(slash - b) : strlen(b);
    bool valid = blen >= 3 && blen <= 255;
    for (size_t i = 0; valid && i < blen; i++)
        valid = bucket_char(b[i]);
    if (!valid)
        return cfs_err_setc(err, CFS_EINVALID, "%s: '%.*s' is not a bucket name (3 to 255 "
                            "letters, digits, '.', '-' or '_'); write s3://bucket/prefix/", url,
                            (int)(blen < 300 ? blen : 300), b);
    *bucket = strndup(b, blen);
    *key = strdup(slash ? slash + 1 : "");
    if (!*bucket || !*key) {
        free(*bucket);
        free(*key);
        *bucket = *key = NULL;
        return cfs_err_oom(err);
    }
    return 0;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
        *--end = '\0';
    return s;
}

/* Whether the INI section header line (without brackets) names profile: "name" in the
 * credentials file, "profile name" in the config file's style. */
static bool section_is(const char *section, const char *profile)
{
    if (strncmp(section, "profile ", 8) == 0)
        section = trim((char *)section + 8);
    return strcmp(section, profile) == 0;
}

static void copy_value(char *dst, size_t cap, const char *value)
{
    snprintf(dst, cap, "%s", value);
}

int cfs_s3_creds_parse(const char *text, const char *profile, cfs_s3_creds *creds, cfs_err *err)
{
    char *copy = strdup(text);
    if (!copy)
        return cfs_err_oom(err);
    memset(creds, 0, sizeof *creds);
    bool in_profile = false, seen = false;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        line = trim(line);
        if (line[0] == '#' || line[0] == ';' || !line[0])
            continue;
        size_t len = strlen(line);
        if (line[0] == '[' && line[len - 1] == ']') {
            line[len - 1] = '\0';
            in_profile = section_is(trim(line + 1), profile);
            seen |= in_profile;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!in_profile || !eq)
            continue;
        *eq = '\0';
        const char *name = trim(line), *value = trim(eq + 1);
        if (strcmp(name, "aws_access_key_id") == 0)
            copy_value(creds->access_key, sizeof creds->access_key, value);
        else if (strcmp(name, "aws_secret_access_key") == 0)
            copy_value(creds->secret_key, sizeof creds->secret_key, value);
        else if (strcmp(name, "aws_session_token") == 0)
            copy_value(creds->session_token, sizeof creds->session_token, value);
    }
    free(copy);
    if (!seen)
        return cfs_err_setc(err, CFS_ENOTFOUND, "no profile [%s]", profile);
    if (!creds->access_key[0] || !creds->secret_key[0])
        return cfs_err_setc(err, CFS_ENOTFOUND, "profile [%s] has no aws_access_key_id and "
                            "aws_secret_access_key", profile);
    return 0;
}

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v && v[0] ? v : fallback;
}

/* The credentials file is small: read whole, NUL-terminated. */
static int read_text(const char *path, cfs_buf *text, cfs_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return cfs_err_errno(err, errno, "cannot read");
    char block[4096];
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread(block, 1, sizeof block, f)) > 0)
        rc = cfs_buf_append(text, block, n) < 0 ? cfs_err_oom(err) : 0;
    if (rc == 0 && ferror(f))
        rc = cfs_err_setc(err, CFS_EIO, "read failed");
    fclose(f);
    if (rc == 0 && cfs_buf_append(text, "", 1) < 0)
        rc = cfs_err_oom(err);
    return rc;
}

static int creds_from_file(cfs_s3_creds *creds, cfs_err *err)
{
    const char *profile = env_or("AWS_PROFILE", "default");
    const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE");
    char *path = file && file[0] ? strdup(file) : NULL;
    if (!path && getenv("HOME"))
        path = cfs_path_join(getenv("HOME"), ".aws/credentials");
    if (!path)
        return cfs_err_setc(err, CFS_ENOTFOUND, "no S3 credentials: set AWS_ACCESS_KEY_ID and "
                            "AWS_SECRET_ACCESS_KEY, or write ~/.aws/credentials");
    cfs_buf text = {0};
    int rc = read_text(path, &text, err);
    if (rc == 0)
        rc = cfs_s3_creds_parse((const char *)text.data, profile, creds, err);
    if (rc < 0)
        cfs_err_setc(err, CFS_ENOTFOUND, "no S3 credentials: AWS_ACCESS_KEY_ID and "
                     "AWS_SECRET_ACCESS_KEY are not set, and %s: %s", path, err->msg);
    cfs_buf_free(&text);
    free(path);
    return rc;
}

int cfs_s3_config_load(cfs_s3_config *cfg, const char *endpoint, cfs_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (endpoint && endpoint[0]) {
        if (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0)
            return cfs_err_setc(err, CFS_EINVALID, "s3_endpoint=%s: not an http:// or https:// "
                                "URL", endpoint);
        size_t n = strlen(endpoint);
        while (n > 0 && endpoint[n - 1] == '/')
            n--;
        if (n >= sizeof cfg->endpoint)
            return cfs_err_setc(err, CFS_EINVALID, "s3_endpoint: too long");
        memcpy(cfg->endpoint, endpoint, n);
    }
    snprintf(cfg->region, sizeof cfg->region, "%s",
             env_or("AWS_REGION", env_or("AWS_DEFAULT_REGION", "us-east-1")));
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    if (id && id[0] && secret && secret[0]) {
        copy_value(cfg->creds.access_key, sizeof cfg->creds.access_key, id);
        copy_value(cfg->creds.secret_key, sizeof cfg->creds.secret_key, secret);
        copy_value(cfg->creds.session_token, sizeof cfg->creds.session_token,
                   env_or("AWS_SESSION_TOKEN", ""));
        return 0;
    }
    return creds_from_file(&cfg->creds, err);
}

char *cfs_s3_object_url(const cfs_s3_config *cfg, const char *bucket, const char *key,
                        const char *query)
{
    char *path = cfs_http_escape(key, true);
    if (!path)
        return NULL;
    const char *q = query ? "?" : "", *qs = query ? query : "";
    size_t len = strlen(cfg->endpoint) + strlen(cfg->region) + strlen(bucket) + strlen(path) +
                 strlen(qs) + 64;
    char *url = malloc(len);
    if (url && cfg->endpoint[0])
        snprintf(url, len, "%s/%s/%s%s%s", cfg->endpoint, bucket, path, q, qs);
    else if (url)
        snprintf(url, len, "https://%s.s3.%s.amazonaws.com/%s%s%s", bucket, cfg->region, path, q,
                 qs);
    free(path);
    return url;
}

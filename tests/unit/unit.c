/* The unit tests' counters and shared helpers: fixture paths, temporary folders, threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "unit.h"

int unit_passed, unit_failed;

void unit_fixture_path(char *buf, size_t len, const char *rel)
{
    const char *top = getenv("srcdir");
    snprintf(buf, len, "%s/tests/fixtures/%s", top ? top : ".", rel);
}

char *unit_slurp(const char *rel, size_t *len)
{
    char path[4096];
    unit_fixture_path(path, sizeof path, rel);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) {
        buf[n] = 0;
        *len = (size_t)n;
    }
    return buf;
}

char *unit_temp_dir(char *tmpl)
{
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    return dir;
}

void unit_remove_folder(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int unit_all_succeed(int n, void *(*fn)(void *), void *arg)
{
    pthread_t t[16];
    int started = 0, ok = 1;
    for (; started < n && started < 16; started++)
        if (pthread_create(&t[started], NULL, fn, arg) != 0)
            break;
    for (int i = 0; i < started; i++) {
        void *r = NULL;
        pthread_join(t[i], &r);
        ok &= r != NULL;
    }
    return ok && started == n;
}

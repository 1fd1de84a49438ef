/* The unit tests' counters and shared helpers: fixture paths, temporary folders, threads. */
#include <pthread.h>
#include <stdlib.h>

#include "unit.h"

int unit_passed, unit_failed;

void unit_fixture_path(char *buf, size_t len, const char *rel)
{
    const char *top = getenv("srcdir");
    snprintf(buf, len, "%s/tests/fixtures/%s", top ? top : ".", rel);
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

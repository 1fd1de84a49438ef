#include "guard.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '7' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

bool cfs_guard_is_mount_point(const char *path)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return false;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return false;
    char line[8192];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        /* id parent major:minor root mountpoint ... */
        char *save = NULL, *tok = strtok_r(line, " ", &save);
        for (int field = 0; tok && field < 4; field++)
            tok = strtok_r(NULL, " ", &save);
        if (tok) {
            unescape(tok);
            found = strcmp(tok, real) == 0;
        }
    }
    fclose(f);
    return found;
}

int cfs_guard_lock_cache(const char *dir, cfs_err *err)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/lock", dir) >= (int)sizeof path)
        return cfs_err_setc(err, CFS_EINVALID, "%s: the cache folder's path is too long", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return cfs_err_errno(err, errno, "%s: cannot create", path);
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        cfs_guard_note_pid(fd);
        return fd;
    }
    int e = errno;
    char pid[32] = "";
    ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    pid[n > 0 ? n : 0] = '\0';
    pid[strcspn(pid, "\n")] = '\0';
    close(fd);
    if (e != EWOULDBLOCK)
        return cfs_err_errno(err, e, "%s: cannot lock", path);
    return cfs_err_setc(err, CFS_ERETRY, "the cache folder %s is in use by another cellucid-fs "
                        "mount (pid %s); give this mount its own folder with -o cache_dir=DIR",
                        dir, pid[0] ? pid : "unknown");
}

void cfs_guard_note_pid(int fd)
{
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) != n)
        return; /* the pid is only for the message of a second mount */
}

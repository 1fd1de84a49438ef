#include "watch.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

enum {
    POLL_MS = 2000,     /* the safety net: a stat pass when no event came */
    SETTLE_MS = 300     /* events come in bursts (a copy is create, writes, close) */
};

struct cfs_watch {
    pthread_t thread;
    int inotify_fd, wake[2];
    cfs_volume *volume;
};

static void drain(int fd)
{
    char buf[4096];
    while (read(fd, buf, sizeof buf) > 0)
        ;
}

static void *watch_loop(void *arg)
{
    cfs_watch *w = arg;
    /* The wake pipe comes first: without inotify only it is polled. */
    struct pollfd fds[2] = {{w->wake[0], POLLIN, 0}, {w->inotify_fd, POLLIN, 0}};
    for (;;) {
        int n = poll(fds, w->inotify_fd >= 0 ? 2 : 1, POLL_MS);
        if (n < 0 && errno != EINTR)
            break;
        if (fds[0].revents)
            break;
        if (n > 0 && w->inotify_fd >= 0 && fds[1].revents) {
            struct timespec settle = {0, SETTLE_MS * 1000000L};
            nanosleep(&settle, NULL);
            drain(w->inotify_fd);
        }
        cfs_err err;
        cfs_volume_refresh(w->volume, &err);
    }
    return NULL;
}

cfs_watch *cfs_watch_start(const char *src, cfs_volume *v, cfs_err *err)
{
    cfs_watch *w = calloc(1, sizeof *w);
    if (!w) {
        cfs_err_oom(err);
        return NULL;
    }
    w->volume = v;
    if (pipe(w->wake) < 0) {
        free(w);
        cfs_err_set(err, "cannot watch %s: %s", src, strerror(errno));
        return NULL;
    }
    w->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    /* Without inotify (limits, foreign filesystems) the stat poll still notices changes. */
    if (w->inotify_fd >= 0 &&
        inotify_add_watch(w->inotify_fd, src, IN_CREATE | IN_DELETE | IN_CLOSE_WRITE |
                                                  IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |
                                                  IN_DELETE_SELF | IN_MOVE_SELF) < 0) {
        close(w->inotify_fd);
        w->inotify_fd = -1;
    }
    if (pthread_create(&w->thread, NULL, watch_loop, w) != 0) {
        if (w->inotify_fd >= 0)
            close(w->inotify_fd);
        close(w->wake[0]);
        close(w->wake[1]);
        free(w);
        cfs_err_set(err, "cannot start the watcher thread");
        return NULL;
    }
    return w;
}

void cfs_watch_stop(cfs_watch *w)
{
    if (!w)
        return;
    ssize_t ignored = write(w->wake[1], "x", 1);
    (void)ignored;
    pthread_join(w->thread, NULL);
    if (w->inotify_fd >= 0)
        close(w->inotify_fd);
    close(w->wake[0]);
    close(w->wake[1]);
    free(w);
}

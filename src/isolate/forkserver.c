#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* CLONE_PARENT */
#endif

#include "forkserver.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "format.h"
#include "worker.h"

/* A child of the daemon, not of this process: the daemon then reaps it (and so learns whether a
 * signal killed it) as it would a worker it forked. glibc's fork() takes no flags; this process
 * is single-threaded and holds no lock, so the raw system call is as safe as fork here. */
static pid_t fork_sibling(void)
{
#if defined(__s390__) || defined(__CRIS__)
    return (pid_t)syscall(SYS_clone, 0, CLONE_PARENT | SIGCHLD);
#else
    return (pid_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
#endif
}

/* One request: a memory limit and a socket end. 1 when one came, 0 at the end of the stream. */
static int receive(int fd, uint64_t *memory, int *sock)
{
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {memory, sizeof *memory};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof control};
    ssize_t got;
    while ((got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    struct cmsghdr *c = got == (ssize_t)sizeof *memory ? CMSG_FIRSTHDR(&msg) : NULL;
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
        c->cmsg_len != CMSG_LEN(sizeof(int)))
        return 0;
    memcpy(sock, CMSG_DATA(c), sizeof *sock);
    return 1;
}

/* In the new worker: it dies with the daemon (its parent now), as an exec'd worker would. It
 * ends without exit handlers: libhdf5's would tear down, page by page, a library the process is
 * about to drop whole. */
static void become_worker(int server, int sock, uint64_t memory, pid_t daemon)
{
    close(server);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != daemon)
        _exit(127);
    prctl(PR_SET_NAME, CFS_WORKER_NAME);
    _exit(cfs_reader_worker_main(sock, memory));
}

int cfs_forkserver_main(int fd)
{
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_NAME, "cfs-forkserver");
    pid_t daemon = getppid();
    cfs_format_preload();
    uint64_t memory;
    int sock;
    while (receive(fd, &memory, &sock)) {
        pid_t pid = fork_sibling();
        if (pid == 0)
            become_worker(fd, sock, memory, daemon);
        int32_t reply = pid > 0 ? (int32_t)pid : -(int32_t)errno;
        close(sock);
        if (send(fd, &reply, sizeof reply, MSG_NOSIGNAL) != (ssize_t)sizeof reply)
            break;
    }
    close(fd);
    return 0;
}

#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forkserver.h"

/* How long the fork server may take to answer: it only forks. */
#define SERVER_TIMEOUT_MS 30000

typedef struct spawn_request {
    const char *exe;
    cfs_worker_proc *out;
    int errnum;
    bool done;
} spawn_request;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static spawn_request *pending;
static pid_t spawner_of;        /* the process whose spawner thread runs, 0: none */
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The fork server this process started (forkserver.h), under server_lock. */
static pthread_mutex_t server_lock = PTHREAD_MUTEX_INITIALIZER;
static cfs_worker_proc server = {0, -1, 0};
static char server_exe[PATH_MAX];

/* A forked child (the daemon) has no spawner thread and no fork server: it starts its own. */
static void after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&changed, NULL);
    pending = NULL;
    spawner_of = 0;
    pthread_mutex_init(&server_lock, NULL);
    if (server.fd >= 0)
        close(server.fd);
    server = (cfs_worker_proc){0, -1, 0};
}

static void end_server(void)
{
    cfs_worker_end(&server, NULL, 0);
    server.owner = 0;
}

/* At exit the server is ended and reaped, not left to die with its parent after it. */
static void end_server_at_exit(void)
{
    pthread_mutex_lock(&server_lock);
    if (server.owner == getpid())
        end_server();
    pthread_mutex_unlock(&server_lock);
}

static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
    atexit(end_server_at_exit);
}

/* Between fork and exec only async-signal-safe calls: the child of a multi-threaded process. */
static void exec_server(const spawn_request *r, int sock, pid_t parent, char *const argv[],
                        char *const envp[])
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    if (sock == 3)
        fcntl(3, F_SETFD, 0);
    else if (dup2(sock, 3) < 0)
        _exit(127);
    close_range(4, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    execve(r->exe, argv, envp);
    _exit(127);
}

extern char **environ;

/* The environment with LD_BIND_NOW=1 first: the server resolves every library symbol once, so
 * its workers do not each resolve them again (and copy the pages it writes) as they run. */
static char **server_environment(void)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = malloc((n + 2) * sizeof *envp);
    if (!envp)
        return NULL;
    envp[0] = (char *)"LD_BIND_NOW=1";
    memcpy(envp + 1, environ, (n + 1) * sizeof *envp);
    return envp;
}

static void do_spawn(spawn_request *r)
{
    char *const argv[] = {(char *)"cellucid-fs", (char *)CFS_FORKSERVER_FLAG, (char *)"3", NULL};
    char **envp = server_environment();
    int sv[2];
    if (!envp || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        r->errnum = envp ? errno : ENOMEM;
        free(envp);
        return;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        exec_server(r, sv[1], parent, argv, envp);
    r->errnum = pid < 0 ? errno : 0;
    free(envp);
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return;
    }
    *r->out = (cfs_worker_proc){pid, sv[0], parent};
}

static void *spawner(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!pending || pending->done)
            pthread_cond_wait(&changed, &lock);
        spawn_request *r = pending;
        pthread_mutex_unlock(&lock);
        do_spawn(r);
        pthread_mutex_lock(&lock);
        r->done = true;
        pthread_cond_broadcast(&changed);
    }
    return NULL;
}

/* Starts exe as the fork server, by fork and exec from the spawner thread. */
static int start_server(const char *exe, cfs_worker_proc *out, cfs_err *err)
{
    spawn_request r = {exe, out, 0, false};
    pthread_mutex_lock(&lock);
    if (spawner_of != getpid()) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, spawner, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            pthread_mutex_unlock(&lock);
            return cfs_err_errno(err, rc, "starting a reader worker");
        }
        spawner_of = getpid();
    }
    while (pending && !pending->done)
        pthread_cond_wait(&changed, &lock);
    pending = &r;
    pthread_cond_broadcast(&changed);
    while (!r.done)
        pthread_cond_wait(&changed, &lock);
    pending = NULL;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    if (r.errnum)
        return cfs_err_errno(err, r.errnum, "starting the reader fork server");
    return 0;
}

/* Under server_lock: a server of exe started by this process, started now if need be. */
static int ensure_server(const char *exe, cfs_err *err)
{
    if (server.owner == getpid() && strcmp(server_exe, exe) == 0)
        return 0;
    if (server.owner == getpid())
        end_server();
    if (strlen(exe) >= sizeof server_exe)
        return cfs_err_set(err, "%s: path too long", exe);
    if (start_server(exe, &server, err) < 0)
        return -1;
    strcpy(server_exe, exe);
    return 0;
}

/* Under server_lock: one worker from the server. -1 with err; *broken when the server must be
 * replaced (it died or broke the protocol). */
static int ask_server(uint64_t memory, cfs_worker_proc *out, bool *broken, cfs_err *err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return cfs_err_errno(err, errno, "starting a reader worker");
    char control[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {&memory, sizeof memory};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof control};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &sv[1], sizeof(int));
    ssize_t sent;
    while ((sent = sendmsg(server.fd, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    close(sv[1]);
    int32_t reply = 0;
    struct pollfd p = {server.fd, POLLIN, 0};
    int ready = 0;
    if (sent == (ssize_t)sizeof memory)
        while ((ready = poll(&p, 1, SERVER_TIMEOUT_MS)) < 0 && errno == EINTR)
            ;
    *broken = ready <= 0 || recv(server.fd, &reply, sizeof reply, MSG_WAITALL) !=
                                (ssize_t)sizeof reply || reply == 0;
    if (*broken || reply < 0) {
        close(sv[0]);
        return *broken ? cfs_err_setc(err, CFS_EIO, "starting a reader worker: the fork server "
                                      "did not answer")
                       : cfs_err_errno(err, -reply, "starting a reader worker");
    }
    *out = (cfs_worker_proc){reply, sv[0], getpid()};
    return 0;
}

int cfs_worker_spawn(const char *exe, uint64_t memory, cfs_worker_proc *out, cfs_err *err)
{
    pthread_once(&once, register_fork_handler);
    pthread_mutex_lock(&server_lock);
    int rc = -1;
    bool broken = true;
    /* A server that died (killed by hand, out of memory) is replaced once. */
    for (int attempt = 0; attempt < 2 && rc < 0 && broken; attempt++) {
        rc = ensure_server(exe, err) < 0 ? -1 : ask_server(memory, out, &broken, err);
        if (rc < 0 && broken && server.owner == getpid())
            end_server();
    }
    pthread_mutex_unlock(&server_lock);
    return rc;
}

void cfs_worker_end(cfs_worker_proc *w, char *how, size_t len)
{
    if (len)
        how[0] = '\0';
    bool ours = w->pid > 0 && w->owner == getpid();
    /* Killed before its socket closes: a worker that sees the end of its socket exits at once
     * (status 0), which would pass for a death of its own. Killed whether it still runs or is
     * ending of itself (a crash): the status it ends with is its own unless it was alive for
     * the kill. */
    if (ours)
        kill(w->pid, SIGKILL);
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    if (!ours) {
        w->pid = 0;
        return;
    }
    int status = 0;
    while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
        ;
    bool by_the_kill = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (len && !by_the_kill && WIFSIGNALED(status))
        snprintf(how, len, "killed by SIG%s", sigabbrev_np(WTERMSIG(status)));
    else if (len && !by_the_kill)
        snprintf(how, len, "exited with status %d", WEXITSTATUS(status));
    w->pid = 0;
}

#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker.h"

typedef struct spawn_request {
    const char *exe;
    uint64_t memory;
    cfs_worker_proc *out;
    int errnum;
    bool done;
} spawn_request;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static spawn_request *pending;
static pid_t spawner_of;        /* the process whose spawner thread runs, 0: none */
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* A forked child (the daemon) has no spawner thread: it starts its own. */
static void after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&changed, NULL);
    pending = NULL;
    spawner_of = 0;
}

static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}

/* Between fork and exec only async-signal-safe calls: the child of a multi-threaded process. */
static void exec_worker(const spawn_request *r, int sock, pid_t parent, char *const argv[])
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
    execv(r->exe, argv);
    _exit(127);
}

static void do_spawn(spawn_request *r)
{
    char memory[32];
    snprintf(memory, sizeof memory, "%" PRIu64, r->memory);
    char *const argv[] = {(char *)"cellucid-fs", (char *)CFS_WORKER_FLAG, (char *)"3", memory,
                          NULL};
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        r->errnum = errno;
        return;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        exec_worker(r, sv[1], parent, argv);
    r->errnum = pid < 0 ? errno : 0;
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

int cfs_worker_spawn(const char *exe, uint64_t memory, cfs_worker_proc *out, cfs_err *err)
{
    pthread_once(&once, register_fork_handler);
    spawn_request r = {exe, memory, out, 0, false};
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
        return cfs_err_errno(err, r.errnum, "starting a reader worker");
    return 0;
}

void cfs_worker_end(cfs_worker_proc *w, char *how, size_t len)
{
    if (len)
        how[0] = '\0';
    bool ours = w->pid > 0 && w->owner == getpid();
    /* Killed before its socket closes: a live worker would see the end of the stream first and
     * exit of itself, and its own status 0 would hide why it was ended (out of memory). */
    if (ours)
        kill(w->pid, SIGKILL);
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    if (!ours) {
        w->pid = 0;
        return;
    }
    /* Killed whether it still runs or is ending of itself (a crash): the status it ends with is
     * its own unless it was alive for the kill. */
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

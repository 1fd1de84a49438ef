#include "parallel.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

void cfs_parallel_run(int n, void *(*fn)(void *), void *arg)
{
    pthread_t *threads = n > 0 ? malloc((size_t)n * sizeof *threads) : NULL;
    int started = 0;
    while (threads && started < n && pthread_create(&threads[started], NULL, fn, arg) == 0)
        started++;
    if (started == 0)
        fn(arg);
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    free(threads);
}

int cfs_parallel_cpus(int most)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1 : cpus > most ? most : (int)cpus;
}

// thread_start.c: whether the threads a command asks for can start (see thread_start.h).
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/address_space.h"
#include "base/common.h"
#include "base/thread_start.h"

#define MiB 1048576.0

static pthread_mutex_t hold = PTHREAD_MUTEX_INITIALIZER;

// Each probe thread waits until every one has started: libgomp's team is alive all at once.
static void *wait_for_all(void *unused) {
    (void)unused;
    pthread_mutex_lock(&hold);
    pthread_mutex_unlock(&hold);
    return NULL;
}

// " under ulimit -u 40" where the resource is limited, else ""
static void limit_clause(char *buf, size_t n, int resource, const char *what, double unit) {
    struct rlimit r;
    buf[0] = 0;
    if (!getrlimit(resource, &r) && r.rlim_cur != RLIM_INFINITY) snprintf(buf, n, "%s %.0f", what, (double)r.rlim_cur / unit);
}

void fc_threads_start_check(int threads) {
    if (threads < 2) return;
    const char *source;
    double stack = fc_thread_stack_bytes(&source);
    pthread_attr_t attr;
    if (pthread_attr_init(&attr)) return;
    // libgomp sets its threads' stack only where OMP_STACKSIZE or GOMP_STACKSIZE says; else the default
    if (strcmp(source, "ulimit -s") && stack > 0) pthread_attr_setstacksize(&attr, (size_t)stack);
    pthread_t *ids = malloc(sizeof *ids * (size_t)(threads - 1));
    if (!ids) {
        pthread_attr_destroy(&attr);
        return;
    }
    pthread_mutex_lock(&hold);
    int started = 0, err = 0;
    for (; started < threads - 1; started++)
        if ((err = pthread_create(&ids[started], &attr, wait_for_all, NULL))) break;
    pthread_mutex_unlock(&hold);
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
    free(ids);
    pthread_attr_destroy(&attr);
    if (!err) return;
    char procs[64], space[64];
    limit_clause(procs, sizeof procs, RLIMIT_NPROC, "ulimit -u", 1);
    limit_clause(space, sizeof space, RLIMIT_AS, "ulimit -v", 1024);
    fc_die("could not start thread %d of %d (%s): each is a process under the limit of processes a user may run%s%s%s, "
           "and maps a stack of %.0f MiB (%s)%s%s: run fewer threads (--threads %d), or raise the limit",
           started + 2, threads, strerror(err), procs[0] ? " (" : "", procs, procs[0] ? ")" : "", stack / MiB, source,
           space[0] ? " in an address space limited by " : "", space, started + 1);
}

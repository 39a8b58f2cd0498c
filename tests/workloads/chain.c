/*
 * A workload with a known call chain, for sparkprof's integration tests.
 *
 *   chain SECONDS THREADS [DEPTH]
 *
 * Each of THREADS threads (named "chainworker") runs
 *   chain_worker_thread -> sparkprof_level_one -> sparkprof_level_two -> sparkprof_hot_leaf
 * burning CPU for SECONDS of its own CPU time. With DEPTH > 0 the threads
 * first recurse DEPTH times through sparkprof_recurse before the chain, to
 * make stacks deeper than the kernel's default limit. At exit it prints the
 * process's CPU time, so tests can compare sample counts against the truth.
 * Built with frame pointers and without inlining.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds;
static int depth;
volatile unsigned long sink;

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void sparkprof_hot_leaf(void) {
    double start = thread_cpu();
    unsigned long x = 1;
    while (thread_cpu() - start < seconds) {
        for (int i = 0; i < 10000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    }
    sink = x;
}

__attribute__((noinline)) void sparkprof_level_two(void) { sparkprof_hot_leaf(); sink++; }
__attribute__((noinline)) void sparkprof_level_one(void) { sparkprof_level_two(); sink++; }

__attribute__((noinline)) void sparkprof_recurse(int n) {
    if (n > 0) sparkprof_recurse(n - 1);
    else sparkprof_level_one();
    sink++;
}

__attribute__((noinline)) void *chain_worker_thread(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "chainworker");
    if (depth > 0) sparkprof_recurse(depth);
    else sparkprof_level_one();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: chain SECONDS THREADS [DEPTH]\n"); return 2; }
    seconds = atof(argv[1]);
    int threads = atoi(argv[2]);
    depth = argc > 3 ? atoi(argv[3]) : 0;
    pthread_t tids[64];
    if (threads < 1 || threads > 64) return 2;
    for (int i = 0; i < threads; i++) pthread_create(&tids[i], NULL, chain_worker_thread, NULL);
    for (int i = 0; i < threads; i++) pthread_join(tids[i], NULL);
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    printf("cpu_seconds=%f\n", ts.tv_sec + ts.tv_nsec / 1e9);
    return 0;
}

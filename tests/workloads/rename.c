/*
 * A thread that renames itself halfway through its work, for sparkprof's
 * integration tests: a sampler that kept a thread's comm past a rename
 * would file the second half under the first name.
 *
 *   rename SECONDS
 *
 * Prints "ready" and stops itself (SIGSTOP) so that the test can start a
 * recording of it, then, once continued, burns SECONDS of CPU time named
 * "beforename", renames itself (prctl(PR_SET_NAME), as pthread_setname_np
 * does) to "aftername" and burns SECONDS more. At exit it prints the CPU
 * time of each half.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void sparkprof_burn(double seconds) {
    double start = thread_cpu();
    unsigned long x = 1;
    while (thread_cpu() - start < seconds) {
        for (int i = 0; i < 10000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    }
    sink = x;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: rename SECONDS\n"); return 2; }
    double seconds = atof(argv[1]);
    printf("ready\n");
    fflush(stdout);
    raise(SIGSTOP);
    prctl(PR_SET_NAME, "beforename");
    double start = thread_cpu();
    sparkprof_burn(seconds);
    double before = thread_cpu() - start;
    prctl(PR_SET_NAME, "aftername");
    sparkprof_burn(seconds);
    double after = thread_cpu() - start - before;
    printf("before=%f after=%f\n", before, after);
    return 0;
}

/*
 * Process churn for the soak benchmark: RATE short-lived native processes
 * per second, each burning a little CPU under a few frames (so some are
 * sampled) and exiting, until killed.
 *
 *   churn RATE
 */
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void churn_leaf(void) {
    for (unsigned long i = 0; i < 200000; i++) sink += i * i;
}

__attribute__((noinline)) static void churn_child(void) {
    churn_leaf();
    _exit(0);
}

int main(int argc, char **argv) {
    long rate = argc > 1 ? atol(argv[1]) : 200;
    struct timespec gap = {0, 1000000000L / (rate > 0 ? rate : 1)};
    for (;;) {
        pid_t pid = fork();
        if (pid == 0) churn_child();
        if (pid > 0) waitpid(pid, NULL, 0);
        nanosleep(&gap, NULL);
    }
}

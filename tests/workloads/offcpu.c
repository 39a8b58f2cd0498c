/*
 * Threads that wait in known places, for sparkprof's off-CPU tests.
 *
 *   offcpu wait SECONDS [go-on-signal|threads-first]
 *                            three waiting threads (below), then prints the
 *                            truth; with go-on-signal they start on SIGUSR1;
 *                            with threads-first they exist from the start
 *                            and begin their work on SIGUSR1
 *   offcpu contend SECONDS N N busy threads (more than the CPUs: preemption)
 *
 * wait mode:
 *   "sleeper":  sparkprof_sleeper_loop burns ~20 ms, then sleeps ~30 ms in
 *               sparkprof_sleepy_wait (nanosleep); it measures the wall time
 *               each sleep took (from the call until it runs again) and
 *               prints the total as "slept_us N" at the end.
 *   "piperead": blocked in sparkprof_pipe_wait, reading a pipe that another
 *               thread feeds a byte every 50 ms.
 *   "contender": blocked in sparkprof_lock_wait on a mutex that the
 *               "holder" thread keeps for 40 ms at a time.
 * Built with frame pointers and without inlining.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double seconds;
static volatile int stop;
volatile unsigned long sink;
static int pipefd[2];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Closed in threads-first mode until SIGUSR1: each thread, named, waits
 * here before its work. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open = 1;

static void gate(void) {
    pthread_mutex_lock(&gate_lock);
    while (!gate_open) pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void spin(double secs) {
    double start = now();
    unsigned long x = 1;
    while (now() - start < secs)
        for (int i = 0; i < 1000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) double sparkprof_sleepy_wait(void) {
    double start = now();
    sleep_ms(30);
    return now() - start;
}

static double slept;

__attribute__((noinline)) void sparkprof_sleeper_loop(void) {
    double end = now() + seconds;
    while (now() < end) {
        spin(0.020);
        slept += sparkprof_sleepy_wait();
    }
}

static void *sleeper(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "sleeper");
    gate();
    sparkprof_sleeper_loop();
    return NULL;
}

__attribute__((noinline)) long sparkprof_pipe_wait(void) {
    char byte;
    return read(pipefd[0], &byte, 1);
}

static void *pipe_reader(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "piperead");
    gate();
    while (sparkprof_pipe_wait() == 1) {
    }
    return NULL;
}

static void *pipe_writer(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "pipewrite");
    gate();
    while (!stop) {
        sleep_ms(50);
        if (write(pipefd[1], "x", 1) != 1) break;
    }
    close(pipefd[1]);
    return NULL;
}

__attribute__((noinline)) void sparkprof_lock_wait(void) {
    pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
}

static void *contender(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "contender");
    gate();
    while (!stop) {
        sparkprof_lock_wait();
        sleep_ms(1);
    }
    return NULL;
}

static void *holder(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "holder");
    gate();
    while (!stop) {
        pthread_mutex_lock(&lock);
        sleep_ms(40);
        pthread_mutex_unlock(&lock);
        sleep_ms(2);
    }
    return NULL;
}

__attribute__((noinline)) void sparkprof_busy(void) { spin(seconds); }

static void *busy(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "busy");
    sparkprof_busy();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: offcpu wait|contend SECONDS [THREADS]\n");
        return 2;
    }
    seconds = atof(argv[2]);
    if (strcmp(argv[1], "contend") == 0) {
        int n = argc > 3 ? atoi(argv[3]) : 4;
        pthread_t threads[64];
        if (n > 64) n = 64;
        for (int i = 0; i < n; i++) pthread_create(&threads[i], NULL, busy, NULL);
        for (int i = 0; i < n; i++) pthread_join(threads[i], NULL);
        printf("done\n");
        return 0;
    }
    int on_signal = argc > 3 && strcmp(argv[3], "go-on-signal") == 0;
    int threads_first = argc > 3 && strcmp(argv[3], "threads-first") == 0;
    sigset_t usr1;
    int sig;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    /* Blocked before any thread exists: every thread inherits it, and
     * sigwait below takes it. */
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    if (pipe(pipefd) != 0) return 1;
    gate_open = !threads_first;
    pthread_t s, r, w, c, h;
    if (on_signal) {
        printf("waiting\n");
        fflush(stdout);
        sigwait(&usr1, &sig);
    }
    pthread_create(&h, NULL, holder, NULL);
    pthread_create(&c, NULL, contender, NULL);
    pthread_create(&r, NULL, pipe_reader, NULL);
    pthread_create(&w, NULL, pipe_writer, NULL);
    pthread_create(&s, NULL, sleeper, NULL);
    if (threads_first) {
        printf("waiting\n");
        fflush(stdout);
        sigwait(&usr1, &sig);
        pthread_mutex_lock(&gate_lock);
        gate_open = 1;
        pthread_cond_broadcast(&gate_cond);
        pthread_mutex_unlock(&gate_lock);
    }
    pthread_join(s, NULL);
    stop = 1;
    pthread_join(w, NULL);
    pthread_join(r, NULL);
    pthread_join(c, NULL);
    pthread_join(h, NULL);
    printf("slept_us %.0f\n", slept * 1e6);
    return 0;
}

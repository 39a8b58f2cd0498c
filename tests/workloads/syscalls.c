/*
 * A workload that spends its time in the kernel: writes to /dev/null from
 * sparkprof_write_loop for SECONDS of wall time. Used to check kernel frames.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) void sparkprof_write_loop(double seconds) {
    int fd = open("/dev/null", O_WRONLY);
    char buf[4096] = {0};
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        for (int i = 0; i < 1000; i++)
            if (write(fd, buf, sizeof buf) < 0) exit(1);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - start.tv_sec + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
    close(fd);
}

int main(int argc, char **argv) {
    sparkprof_write_loop(argc > 1 ? atof(argv[1]) : 2.0);
    return 0;
}

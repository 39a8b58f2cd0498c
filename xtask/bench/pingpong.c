/*
 * The off-CPU worst case of `cargo xtask bench --only offcpu`: two processes
 * bouncing one byte over two pipes a FIXED number of round trips. Each side
 * blocks in read() once per round trip, so every round trip is a switch-out
 * and a switch-in of each process: as many sched_switch events per second
 * as two processes can make, and a profiler's cost per switch shows up as
 * extra wall time.
 *
 * Both processes are pinned to CPU 0, so that every round trip is two
 * direct switches on one CPU: without that, the round trip's time depends
 * mostly on whether the scheduler put the two on one CPU or on two (waking
 * an idle virtual CPU costs tens of microseconds), which varies from run
 * to run by a factor of ten, and anything else running (a profiler)
 * changes it. On a host with more CPUs the others stay free for the
 * profiler's own process.
 *
 * usage: pingpong ROUND_TRIPS [BLOCKS]
 *
 * The parent forks the child and prints "pids PARENT CHILD". Then, BLOCKS
 * times (1 unless given), it waits for a line on stdin (so that a profiler
 * can be started, or stopped, with both pids first), makes ROUND_TRIPS
 * round trips and prints "elapsed SECONDS" (monotonic clock around those
 * round trips only). It exits 0 after the last block. Blocks of one pair
 * of processes compare conditions without the spread from one pair of
 * processes to the next (where the two land).
 *
 * Built with frame pointers, like the programs sparkprof is meant for.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void fail(const char *what)
{
	perror(what);
	exit(1);
}

/* One byte there and back, as seen from either side. */
__attribute__((noinline)) static void bounce(int in, int out, int first)
{
	char byte = 'x';
	if (first && write(out, &byte, 1) != 1)
		fail("write");
	if (read(in, &byte, 1) != 1)
		fail("read");
	if (!first && write(out, &byte, 1) != 1)
		fail("write");
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 2 && argc != 3) {
		fprintf(stderr, "usage: %s ROUND_TRIPS [BLOCKS]\n", argv[0]);
		return 2;
	}
	uint64_t trips = strtoull(argv[1], NULL, 10);
	uint64_t blocks = argc == 3 ? strtoull(argv[2], NULL, 10) : 1;
	if (trips == 0 || blocks == 0) {
		fprintf(stderr, "pingpong: ROUND_TRIPS and BLOCKS must be positive\n");
		return 2;
	}
	cpu_set_t cpu0;
	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	if (sched_setaffinity(0, sizeof cpu0, &cpu0) != 0)
		fail("sched_setaffinity"); /* the child inherits it */
	int to_child[2], to_parent[2];
	if (pipe(to_child) != 0 || pipe(to_parent) != 0)
		fail("pipe");
	pid_t child = fork();
	if (child < 0)
		fail("fork");
	if (child == 0) {
		close(to_child[1]);
		close(to_parent[0]);
		for (uint64_t i = 0; i < trips * blocks; i++)
			bounce(to_child[0], to_parent[1], 0);
		_exit(0);
	}
	close(to_child[0]);
	close(to_parent[1]);
	printf("pids %d %d\n", (int)getpid(), (int)child);
	fflush(stdout);
	char line[64];
	double last = 0;
	for (uint64_t block = 0; block < blocks; block++) {
		if (!fgets(line, sizeof line, stdin))
			fail("waiting for the go line on stdin");
		double start = now();
		for (uint64_t i = 0; i < trips; i++)
			bounce(to_parent[0], to_child[1], 1);
		double seconds = now() - start;
		if (block + 1 < blocks) {
			printf("elapsed %.6f\n", seconds);
			fflush(stdout);
		} else {
			last = seconds;
		}
	}
	int status;
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		fprintf(stderr, "pingpong: the child failed\n");
		return 1;
	}
	/* The last block's time once the child is known to have done well. */
	printf("elapsed %.6f\n", last);
	fflush(stdout);
	return 0;
}

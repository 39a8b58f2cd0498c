/*
 * The benchmark workload of `cargo xtask bench`: a FIXED amount of CPU work
 * (not a fixed time) on two threads, so a profiler's overhead shows up as
 * extra wall time. Each unit of work descends a 12-deep call chain and mixes
 * integers at the bottom, so samples carry a real user stack to unwind.
 *
 * usage: workload ROUNDS   ROUNDS units of work on each of two threads
 *        workload 0        loop until killed (background load)
 *
 * Built with frame pointers, like the programs sparkprof is meant for.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 2
#define DEPTH 12
#define MIX_STEPS 4096

static volatile uint64_t sink;

__attribute__((noinline)) static uint64_t mix(uint64_t x)
{
	for (int i = 0; i < MIX_STEPS; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
	}
	return x;
}

__attribute__((noinline)) static uint64_t descend(int depth, uint64_t x)
{
	if (depth == 0)
		return mix(x);
	/* Not a tail call: the frame stays on the stack while mix() runs. */
	return descend(depth - 1, x + (uint64_t)depth) ^ (uint64_t)depth;
}

static void *worker(void *arg)
{
	uint64_t rounds = *(const uint64_t *)arg;
	uint64_t x = (uint64_t)(uintptr_t)&x | 1;
	for (uint64_t i = 0; rounds == 0 || i < rounds; i++)
		x = descend(DEPTH, x);
	sink = x;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s ROUNDS (0: forever)\n", argv[0]);
		return 2;
	}
	uint64_t rounds = strtoull(argv[1], NULL, 10);
	pthread_t threads[THREADS];
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, worker, &rounds) != 0)
			return 1;
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}

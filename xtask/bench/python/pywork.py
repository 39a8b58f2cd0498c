"""The Python workload of `cargo xtask bench --only python`: a FIXED amount of
CPU-bound pure-Python work (not a fixed time) under a known call chain, so
that a profiler's overhead shows up as extra wall time and every sample has
Python frames to walk: <module> -> main -> run -> outer -> middle -> inner ->
leaf.

usage: python pywork.py [ROUNDS]

Prints "pid N" and waits for a line on stdin (so that a profiler can be
started on the pid first). Then does ROUNDS rounds of work (default 15000,
about 3 s with CPython 3.12 on the reference host; 0: loop until killed),
prints "elapsed SECONDS" (time.perf_counter around the work only) and waits
for stdin to close (or for one more line) before it exits 0, so that the
profiler's figures can be read while the process still lives. One thread:
the interpreter runs one at a time. Runs on CPython 3.8 and newer.
"""

import os
import sys
import time

DEFAULT_ROUNDS = 15000
STEPS = 2000


def leaf(x):
    # Integer mixing kept below 2**32, so no big integers.
    for i in range(STEPS):
        x = (x * 1103515245 + 12345 + i) & 0xFFFFFFFF
    return x


def inner(x):
    return leaf(x) ^ 0x5A5A


def middle(x):
    return inner(x + 1)


def outer(x):
    return middle(x + 2)


def run(rounds):
    x = 1
    done = 0
    while rounds == 0 or done < rounds:
        x = outer(x)
        done += 1
    return x


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ROUNDS
    print("pid %d" % os.getpid(), flush=True)
    if not sys.stdin.readline():
        sys.exit("pywork: stdin closed before the go line")
    started = time.perf_counter()
    result = run(rounds)
    elapsed = time.perf_counter() - started
    print("elapsed %.6f" % elapsed, flush=True)
    # The result, so that the work cannot be skipped.
    print("result %d" % result, file=sys.stderr, flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()

"""A Python workload with known call chains, for sparkprof's Python-frame
tests. Runs on CPython 3.8 to 3.13 (no newer syntax).

usage: python py_chain.py MODE SECONDS

  chain    the main thread runs outer -> middle -> inner (CPU-bound), and
           two more threads run worker_a -> spin_a and worker_b -> spin_b
  deep     the main thread recurses 250 deep in recurse, then runs inner
  sleeper  the main thread sleeps in nap (for the attach and exit tests)
  mix      one thread splits its time about 50/30/20 between alpha, beta
           and gamma (for comparing shares with another profiler)
  forks    the main thread runs outer -> middle -> inner for SECONDS, then
           forks three children one after another, each busy 2.5 s in
           forked -> outer -> middle -> inner and then asleep 1.5 s (named
           while alive); prints "child PID" for each

Prints "ready" once every thread runs, then works for SECONDS.
"""

import sys
import threading
import time


def inner(deadline):
    total = 0
    while time.time() < deadline:
        for i in range(2000):
            total += i * i
    return total


def middle(deadline):
    return inner(deadline)


def outer(deadline):
    return middle(deadline)


def spin_a(deadline):
    total = 0
    while time.time() < deadline:
        for i in range(2000):
            total ^= i
    return total


def worker_a(deadline):
    return spin_a(deadline)


def spin_b(deadline):
    total = 1
    while time.time() < deadline:
        for i in range(2000):
            total = (total * 3 + i) % 1000003
    return total


def worker_b(deadline):
    return spin_b(deadline)


def recurse(depth, deadline):
    if depth == 0:
        return inner(deadline)
    return recurse(depth - 1, deadline)


def work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def alpha():
    return work(5000)


def beta():
    return work(3000)


def gamma():
    return work(2000)


def mix(deadline):
    while time.time() < deadline:
        alpha()
        beta()
        gamma()


def forked(deadline):
    return outer(deadline)


def fork_children():
    import os

    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            forked(time.time() + 2.5)
            time.sleep(1.5)
            os._exit(0)
        print("child %d" % pid, flush=True)
        os.waitpid(pid, 0)


def nap(deadline):
    while time.time() < deadline:
        time.sleep(0.05)


# What the "subinterp" mode's thread runs in a sub-interpreter (3.13's
# _interpreters): its own functions, named from a file name of its own.
SUB_SOURCE = """
import time

def sub_leaf(deadline):
    total = 0
    while time.time() < deadline:
        total += 1

def sub_outer(deadline):
    sub_leaf(deadline)

sub_outer(DEADLINE)
"""


def in_sub_interpreter(deadline):
    import _interpreters

    interp = _interpreters.create()
    source = SUB_SOURCE.replace("DEADLINE", repr(deadline))
    code = "exec(compile(%r, 'py_chain_sub.py', 'exec'))" % source
    _interpreters.exec(interp, code)
    _interpreters.destroy(interp)


def main():
    mode, seconds = sys.argv[1], float(sys.argv[2])
    deadline = time.time() + seconds
    sys.setrecursionlimit(10000)
    threads = []
    if mode == "chain":
        for target in (worker_a, worker_b):
            thread = threading.Thread(target=target, args=(deadline,))
            thread.start()
            threads.append(thread)
    if mode == "subinterp":
        thread = threading.Thread(target=in_sub_interpreter, args=(deadline,))
        thread.start()
        threads.append(thread)
    print("ready", flush=True)
    if mode == "chain":
        outer(deadline)
    elif mode == "deep":
        recurse(250, deadline)
    elif mode == "sleeper":
        nap(deadline)
    elif mode == "mix":
        mix(deadline)
    elif mode == "subinterp":
        nap(deadline)
    elif mode == "forks":
        outer(deadline)
        fork_children()
    else:
        sys.exit("unknown mode " + mode)
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()

"""Python process churn for the soak benchmark: RATE short-lived CPython
processes per second (forked, so each is a CPython process without the
interpreter's start-up), each running a little Python code and exiting,
until killed.

    py_churn.py RATE
"""

import os
import sys
import time


def churn_work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def churn_child():
    churn_work(20000)
    os._exit(0)


rate = int(sys.argv[1]) if len(sys.argv) > 1 else 50
gap = 1.0 / max(rate, 1)
while True:
    pid = os.fork()
    if pid == 0:
        churn_child()
    os.waitpid(pid, 0)
    time.sleep(gap)

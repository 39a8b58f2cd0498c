"""`cargo xtask bench`, section 8: a CPython process with many threads.

    python3 many_threads.py THREADS

Starts THREADS threads that sleep, prints "ready", and sleeps until killed.
"""
import sys
import threading
import time


def sleep_forever():
    while True:
        time.sleep(3600)


for _ in range(int(sys.argv[1])):
    threading.Thread(target=sleep_forever, daemon=True).start()
print("ready", flush=True)
while True:
    time.sleep(3600)

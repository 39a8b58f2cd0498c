/* LD_PRELOADed into a program: before its main, spins on-CPU until the file
 * named by SPARKPROF_TEST_GO exists. Preloaded into `java`, it holds the
 * launcher where it has not mapped libjvm.so yet, as a launcher is for its
 * first milliseconds, for as long as a test needs to sample it there. */
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void spin_until_go(void) {
    const char *go = getenv("SPARKPROF_TEST_GO");
    if (go == NULL) {
        return;
    }
    /* Mostly on-CPU here, not in the system call (whose caller a frame-
     * pointer walk out of libc may not find). */
    volatile unsigned long spins = 0;
    while (access(go, F_OK) != 0) {
        for (unsigned long i = 0; i < 1000000; i++) {
            spins++;
        }
    }
}

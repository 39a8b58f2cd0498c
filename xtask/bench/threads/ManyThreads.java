// `cargo xtask bench`, section 8: a JVM with many threads.
//
//   java ManyThreads SLEEPERS
//
// Starts SLEEPERS threads that sleep (named "sleeper-N"), prints "ready",
// then runs two busy threads of fixed integer work and prints, every 100 ms,
// "count <monotonic ns> <work rounds so far>" so the bench can read the
// busy loop's rate over any window.
public class ManyThreads {
    static volatile long sink;
    static final java.util.concurrent.atomic.AtomicLong rounds = new java.util.concurrent.atomic.AtomicLong();

    public static void main(String[] args) throws Exception {
        int sleepers = Integer.parseInt(args[0]);
        for (int i = 0; i < sleepers; i++) {
            Thread t = new Thread(ManyThreads::sleepForever, "sleeper-" + i);
            t.setDaemon(true);
            t.start();
        }
        for (int i = 0; i < 2; i++) {
            Thread t = new Thread(ManyThreads::busy, "busy-" + i);
            t.setDaemon(true);
            t.start();
        }
        System.out.println("ready");
        while (true) {
            Thread.sleep(100);
            System.out.println("count " + System.nanoTime() + " " + rounds.get());
        }
    }

    static void sleepForever() {
        try {
            while (true) Thread.sleep(3_600_000);
        } catch (InterruptedException e) {
        }
    }

    static void busy() {
        while (true) {
            long x = 0;
            for (int j = 0; j < 200_000; j++) x += j ^ (x >>> 3);
            sink = x;
            rounds.incrementAndGet();
        }
    }
}

/**
 * A JVM workload with distinctive hot methods, for sparkprof's JIT tests.
 *
 *   java -XX:+PreserveFramePointer HotMethods SECONDS THREADS
 *
 * Each worker thread (named hotworker-N) spends its time in
 * sparkprofAlphaHot, whose loop gets compiled on stack (OSR), so samples land
 * in JIT code named HotMethods.sparkprofAlphaHot by the JVM's perf map.
 * Prints "ready" once the workers run.
 */
public class HotMethods {
    static volatile long sink;

    static long sparkprofAlphaHot(long seed, long endNanos) {
        long x = seed;
        while (true) {
            for (int i = 0; i < 1_000_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
                x ^= (x >>> 17);
            }
            if (System.nanoTime() >= endNanos) {
                return x;
            }
        }
    }

    public static void main(String[] args) throws Exception {
        double seconds = Double.parseDouble(args[0]);
        int threads = Integer.parseInt(args[1]);
        long end = System.nanoTime() + (long) (seconds * 1e9);
        Thread[] workers = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final long seed = t + 1;
            workers[t] = new Thread(() -> sink += sparkprofAlphaHot(seed, end), "hotworker-" + t);
            workers[t].start();
        }
        System.out.println("ready");
        System.out.flush();
        for (Thread worker : workers) {
            worker.join();
        }
    }
}

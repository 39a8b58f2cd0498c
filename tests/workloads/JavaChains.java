/**
 * A JVM workload whose hot method sits under a known chain of Java calls,
 * for the tests of sparkprof's HotSpot stack walk:
 *
 *   java [FLAGS] JavaChains SECONDS THREADS DEPTH [jni]
 *
 * Each worker thread (named chainworker-N) runs
 * Thread.run -> lambda -> sparkprofOuter -> sparkprofDeep (DEPTH times,
 * recursively) -> sparkprofMiddle -> sparkprofHotLeaf, and spends its time
 * in sparkprofHotLeaf's loop; with `jni`, the loop calls the native
 * Runtime.availableProcessors (JNI into libjava, then libjvm), so the time
 * goes to native code under Java frames. Prints "ready" once the workers run.
 */
public class JavaChains {
    static volatile long sink;
    static boolean jni;

    static long sparkprofHotLeaf(long seed, long endNanos) {
        long x = seed;
        if (jni) {
            Runtime runtime = Runtime.getRuntime();
            while (System.nanoTime() < endNanos) {
                for (int i = 0; i < 1000; i++) {
                    x += runtime.availableProcessors();
                }
            }
            return x;
        }
        while (true) {
            for (int i = 0; i < 100_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
                x ^= (x >>> 17);
            }
            if (System.nanoTime() >= endNanos) {
                return x;
            }
        }
    }

    static long sparkprofMiddle(long seed, long end) {
        return sparkprofHotLeaf(seed, end) + 1;
    }

    static long sparkprofDeep(int depth, long seed, long end) {
        if (depth == 0) {
            return sparkprofMiddle(seed, end);
        }
        return sparkprofDeep(depth - 1, seed, end) + 1;
    }

    static long sparkprofOuter(int depth, long seed, long end) {
        return sparkprofDeep(depth, seed, end) + 1;
    }

    public static void main(String[] args) throws Exception {
        double seconds = Double.parseDouble(args[0]);
        int threads = Integer.parseInt(args[1]);
        int depth = Integer.parseInt(args[2]);
        jni = args.length > 3 && args[3].equals("jni");
        long end = System.nanoTime() + (long) (seconds * 1e9);
        Thread[] workers = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final long seed = t + 1;
            workers[t] = new Thread(() -> sink += sparkprofOuter(depth, seed, end), "chainworker-" + t);
            workers[t].start();
        }
        System.out.println("ready");
        System.out.flush();
        for (Thread worker : workers) {
            worker.join();
        }
    }
}

/**
 * A JVM workload whose hot method sits under a known chain of Java calls,
 * for the tests of sparkprof's HotSpot stack walk:
 *
 *   java [FLAGS] JavaChains SECONDS THREADS DEPTH [jni|zlib]
 *
 * Each worker thread (named chainworker-N) runs
 * Thread.run -> lambda -> sparkprofOuter -> sparkprofDeep (DEPTH times,
 * recursively) -> sparkprofMiddle -> sparkprofHotLeaf, and spends its time
 * in sparkprofHotLeaf's loop; with `jni`, the loop calls the native
 * Runtime.availableProcessors (JNI into libjava, then libjvm), so the time
 * goes to native code under Java frames; with `zlib`, it compresses with a
 * Deflater, so the time goes to zlib's deflate, native code built without
 * frame pointers (it keeps data in rbp). Prints "ready" once the workers run.
 */
public class JavaChains {
    static volatile long sink;
    static String mode;

    static long sparkprofHotLeaf(long seed, long endNanos) {
        long x = seed;
        if (mode.equals("zlib")) {
            byte[] input = new byte[256 * 1024];
            for (int i = 0; i < input.length; i++) {
                input[i] = (byte) ((i * 31 + (i >> 7)) % 61);
            }
            byte[] output = new byte[512 * 1024];
            java.util.zip.Deflater deflater = new java.util.zip.Deflater(9);
            while (System.nanoTime() < endNanos) {
                deflater.reset();
                deflater.setInput(input);
                deflater.finish();
                while (!deflater.finished()) {
                    x += deflater.deflate(output);
                }
            }
            return x;
        }
        if (mode.equals("jni")) {
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
        mode = args.length > 3 ? args[3] : "";
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

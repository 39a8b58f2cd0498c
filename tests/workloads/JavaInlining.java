/**
 * A JVM workload for sparkprof's inlining test:
 *
 *   java -XX:CompileCommand=dontinline,JavaInlining::sparkprofCallee JavaInlining SECONDS
 *
 * sparkprofLoop calls sparkprofOuterInlined, which calls
 * sparkprofInnerInlined; the JIT inlines both into sparkprofLoop's
 * compiled code, and the inner one calls sparkprofCallee (kept out of
 * line by the flag), where the time goes. Prints "ready" once running.
 */
public class JavaInlining {
    static volatile long sink;

    static long sparkprofCallee(long x) {
        long y = x;
        for (int i = 0; i < 50; i++) {
            y = y * 31 + i;
        }
        return y;
    }

    static long sparkprofInnerInlined(long x) {
        return sparkprofCallee(x) ^ (x >>> 7);
    }

    static long sparkprofOuterInlined(long x) {
        return sparkprofInnerInlined(x + 1) + 3;
    }

    static long sparkprofLoop(long n) {
        long acc = 0;
        for (long i = 0; i < n; i++) {
            acc += sparkprofOuterInlined(acc + i);
        }
        return acc;
    }

    public static void main(String[] args) {
        long end = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        System.out.println("ready");
        System.out.flush();
        while (System.nanoTime() < end) {
            sink += sparkprofLoop(1_000_000);
        }
    }
}

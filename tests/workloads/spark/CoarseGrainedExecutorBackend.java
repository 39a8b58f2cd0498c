package org.apache.spark.executor;

/**
 * A stand-in for a Spark executor, for sparkprof's stage-attribution test.
 *
 * Its main class and command line look like a standalone executor's
 * (`--executor-id`, `--app-id`, ...), and its pool threads rename themselves
 * exactly as Spark's task threads do: `Executor task launch worker-N` when
 * the pool creates them, `Executor task launch worker for task P.A in stage
 * S.SA (TID T)` at each task start and `Executor task idle worker#N` after
 * it. Stage S always runs the hot method `stageS...Hot` and nothing else, so
 * a profile can check that every sample of that method landed in stage S.
 * Each hot method does a short burst of work per call, so it is compiled at
 * a call boundary (run it with the flags in FAKE_EXECUTOR_JVM_FLAGS of
 * tests/src/lib.rs and each is compiled once and never moves in the code
 * cache: its frames are named reliably).
 * Tasks alternate between long (about a second) and short (150-300 ms)
 * ones, and the two pool threads take tasks of all stages in turn.
 *
 * Usage: java ... org.apache.spark.executor.CoarseGrainedExecutorBackend
 *   --executor-id ID --app-id APP [other executor flags] --seconds N
 * Prints "ready" once the pool runs, "done TASKS" at the end.
 */
public class CoarseGrainedExecutorBackend {
    static volatile long sink;

    static long stageZeroHot(long x) {
        for (int i = 0; i < 20_000; i++) x = x * 6364136223846793005L + 1442695040888963407L;
        return x;
    }

    static long stageOneHot(long x) {
        for (int i = 0; i < 20_000; i++) x ^= (x << 13) ^ (x >>> 7) ^ (x << 17);
        return x;
    }

    static long stageTwoHot(long seed) {
        double x = 1.5 + (seed & 7);
        for (int i = 0; i < 20_000; i++) x = x * 1.0000001 + 0.5 / (x + 1.0);
        return (long) x;
    }

    static long stageThreeHot(long x) {
        for (int i = 0; i < 20_000; i++) x = Long.rotateLeft(x, 5) + (x % 1_000_003L);
        return x;
    }

    /** Runs stage `stage`'s hot method in short calls until the deadline. */
    static long runStage(int stage, long deadline) {
        long x = 1;
        while (System.nanoTime() < deadline) {
            switch (stage) {
                case 0: x = stageZeroHot(x); break;
                case 1: x = stageOneHot(x); break;
                case 2: x = stageTwoHot(x); break;
                default: x = stageThreeHot(x); break;
            }
        }
        return x;
    }

    static String flag(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) if (args[i].equals(name)) return args[i + 1];
        return fallback;
    }

    public static void main(String[] args) throws Exception {
        final long seconds = Long.parseLong(flag(args, "--seconds", "10"));
        final long end = System.nanoTime() + seconds * 1_000_000_000L;
        final int workers = 2;
        final int[] nextTask = {0};
        Thread[] pool = new Thread[workers];
        for (int w = 0; w < workers; w++) {
            final int worker = w;
            pool[w] = new Thread(() -> {
                Thread me = Thread.currentThread();
                int done = 0;
                while (System.nanoTime() < end) {
                    int task;
                    synchronized (nextTask) { task = nextTask[0]++; }
                    int stage = task % 4;
                    boolean shortTask = task % 3 != 0;
                    long millis = shortTask ? 150 + (task * 37) % 150 : 900;
                    me.setName("Executor task launch worker for task " + (task % 8) + ".0 in stage "
                        + stage + ".0 (TID " + task + ")");
                    sink += runStage(stage, Math.min(end, System.nanoTime() + millis * 1_000_000L));
                    me.setName("Executor task idle worker#" + worker);
                    try { Thread.sleep(20); } catch (InterruptedException e) { return; }
                    done++;
                }
            }, "Executor task launch worker-" + w);
            pool[w].setDaemon(true);
        }
        for (Thread t : pool) t.start();
        System.out.println("ready");
        System.out.flush();
        for (Thread t : pool) t.join();
        System.out.println("done " + nextTask[0]);
        System.out.flush();
    }
}

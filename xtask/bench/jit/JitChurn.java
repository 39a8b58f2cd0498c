// A busy JVM whose code cache keeps changing, for `cargo xtask bench --only jit`.
//
// Like a Spark executor that runs stage after stage of generated code, it
// loads a new generation of classes every PHASE_MS, runs their methods hot
// on every CPU until they are JIT-compiled (C1, then C2, replacing the C1
// code), then drops the generation and collects it, so that its classes are
// unloaded and their compiled code is freed and the addresses reused by the
// next generation's code. Every generation's classes have new names
// (ZqGen0001, ZqGen0002, ...): made from the template ZqGen0000 by
// rewriting the name in its class file (same length, so the constant pool
// stays valid), so a JIT frame named after a stale map gets a *different*
// name, which the benchmark can detect.
//
// Usage: java -XX:+PreserveFramePointer -cp DIR JitChurn SECONDS [THREADS]

import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;

public final class JitChurn {
    /// How long one generation of classes runs.
    static final long PHASE_MS = 2500;
    /// Classes per generation.
    static final int CLASSES = 24;
    static final String TEMPLATE = "ZqGen0000";

    static volatile long sink;

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 75;
        int threads = args.length > 1 ? Integer.parseInt(args[1])
                : Runtime.getRuntime().availableProcessors();
        byte[] template = readClass(TEMPLATE);
        AtomicReference<List<Op>> current = new AtomicReference<>(List.of());
        long end = System.nanoTime() + seconds * 1_000_000_000L;

        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int offset = t;
            Thread w = new Thread(() -> {
                long acc = offset;
                int i = offset;
                while (System.nanoTime() < end) {
                    List<Op> ops = current.get();
                    if (ops.isEmpty()) { Thread.onSpinWait(); continue; }
                    acc += ops.get(i++ % ops.size()).run(acc);
                }
                sink = acc;
            }, "churn-worker-" + t);
            w.start();
            workers.add(w);
        }

        int generation = 0;
        while (System.nanoTime() < end) {
            generation++;
            Loader loader = new Loader(template);
            List<Op> ops = new ArrayList<>();
            for (int c = 0; c < CLASSES; c++) {
                int n = ((generation - 1) * CLASSES + c) % 9999 + 1;
                String name = String.format("ZqGen%04d", n);
                ops.add((Op) loader.loadClass(name).getDeclaredConstructor().newInstance());
            }
            current.set(ops);
            loader = null;
            ops = null;
            Thread.sleep(PHASE_MS);
            // The previous generation is unreachable now: unload it.
            System.gc();
        }
        for (Thread w : workers) w.join();
        System.out.println("generations: " + generation + ", sink " + sink);
    }

    static byte[] readClass(String name) throws Exception {
        try (InputStream in = JitChurn.class.getResourceAsStream(name + ".class")) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            in.transferTo(out);
            return out.toByteArray();
        }
    }

    /// Defines ZqGenNNNN from the template by rewriting its name.
    static final class Loader extends ClassLoader {
        final byte[] template;

        Loader(byte[] template) {
            super(JitChurn.class.getClassLoader());
            this.template = template;
        }

        @Override
        protected Class<?> findClass(String name) throws ClassNotFoundException {
            if (!name.startsWith("ZqGen") || name.length() != TEMPLATE.length()) {
                throw new ClassNotFoundException(name);
            }
            byte[] bytes = replace(template, TEMPLATE.getBytes(StandardCharsets.US_ASCII),
                    name.getBytes(StandardCharsets.US_ASCII));
            return defineClass(name, bytes, 0, bytes.length);
        }
    }

    static byte[] replace(byte[] data, byte[] from, byte[] to) {
        byte[] out = data.clone();
        outer:
        for (int i = 0; i + from.length <= out.length; i++) {
            for (int j = 0; j < from.length; j++) {
                if (out[i + j] != from[j]) continue outer;
            }
            System.arraycopy(to, 0, out, i, to.length);
        }
        return out;
    }
}

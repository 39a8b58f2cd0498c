// The template of the generated classes (see JitChurn.java): a call chain
// of small methods, each hot enough to be compiled on its own.
public final class ZqGen0000 implements Op {
    private long state = 17;

    @Override
    public long run(long x) {
        long acc = x;
        for (int i = 0; i < 200; i++) {
            acc = stageA(acc + i);
        }
        return acc;
    }

    private long stageA(long x) {
        return stageB(x * 31 + (x >>> 7)) ^ state;
    }

    private long stageB(long x) {
        state += x & 3;
        return (x & 1) == 0 ? stageC(x >>> 1) : stageD(x * 3 + 1);
    }

    private long stageC(long x) {
        long h = x;
        for (int i = 0; i < 8; i++) {
            h = h * 0x9E3779B97F4A7C15L + i;
        }
        return h;
    }

    private long stageD(long x) {
        return Long.rotateLeft(x, 13) * 0xC2B2AE3D27D4EB4FL + stageC(x ^ state);
    }
}

// What every generated class does (see JitChurn.java).
public interface Op {
    long run(long x);
}

/**
 * Java threads that wait in known ways, for sparkprof's off-CPU tests:
 * "javasleeper" calls Thread.sleep(30) in a loop, "javalocker" enters a
 * monitor that "javaholder" keeps for 40 ms at a time.
 *
 * Usage: java Waits SECONDS. Prints "ready" once the threads run.
 */
public class Waits {
    static final Object LOCK = new Object();
    static volatile boolean stop;

    static void sleepLoop() throws InterruptedException {
        while (!stop) Thread.sleep(30);
    }

    static void lockLoop() throws InterruptedException {
        while (!stop) {
            synchronized (LOCK) { Waits.class.hashCode(); }
            Thread.sleep(1);
        }
    }

    static void holdLoop() throws InterruptedException {
        while (!stop) {
            synchronized (LOCK) { Thread.sleep(40); }
            Thread.sleep(2);
        }
    }

    interface Body { void run() throws InterruptedException; }

    static Thread start(String name, Body body) {
        Thread t = new Thread(() -> {
            try { body.run(); } catch (InterruptedException e) { }
        }, name);
        t.start();
        return t;
    }

    public static void main(String[] args) throws Exception {
        long seconds = Long.parseLong(args[0]);
        Thread[] threads = {
            start("javasleeper", Waits::sleepLoop),
            start("javaholder", Waits::holdLoop),
            start("javalocker", Waits::lockLoop),
        };
        System.out.println("ready");
        System.out.flush();
        Thread.sleep(seconds * 1000);
        stop = true;
        for (Thread t : threads) t.join();
    }
}

package seed;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/** Closed-loop callers and their latency figures. */
final class Stats {
    interface Call {
        void call() throws Exception;
    }

    /**
     * Runs callers threads calling c for secs and prints "calls N errors E
     * mean_ms M p50_ms P p99_ms Q max_ms X" for calls that finished.
     */
    static void run(int callers, long secs, Call c) throws InterruptedException {
        long end = System.nanoTime() + secs * 1_000_000_000L;
        List<Long> lat = Collections.synchronizedList(new ArrayList<>());
        AtomicLong errors = new AtomicLong();
        Thread[] ts = new Thread[callers];
        for (int i = 0; i < callers; i++) {
            ts[i] = new Thread(() -> {
                while (System.nanoTime() < end) {
                    long t0 = System.nanoTime();
                    try {
                        c.call();
                        lat.add(System.nanoTime() - t0);
                    } catch (Exception e) {
                        if (errors.incrementAndGet() == 1) {
                            e.printStackTrace();
                        }
                    }
                }
            });
            ts[i].setDaemon(true);
            ts[i].start();
        }
        for (Thread t : ts) {
            t.join(Math.max(1, (end - System.nanoTime()) / 1_000_000 + 130_000));
        }
        List<Long> l;
        synchronized (lat) {
            l = new ArrayList<>(lat);
        }
        Collections.sort(l);
        double sum = 0;
        for (long v : l) {
            sum += v;
        }
        int n = l.size();
        System.out.printf("calls %d errors %d mean_ms %.0f p50_ms %.0f p99_ms %.0f max_ms %.0f%n", n, errors.get(),
                n == 0 ? 0 : sum / n / 1e6, n == 0 ? 0 : l.get(n / 2) / 1e6, n == 0 ? 0 : l.get(n * 99 / 100) / 1e6,
                n == 0 ? 0 : l.get(n - 1) / 1e6);
        System.out.flush();
    }
}

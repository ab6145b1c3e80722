package seed;

import org.apache.dubbo.config.ApplicationConfig;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;

/**
 * Dubbo consumer as the seed ran it: CALLERS threads, each calling again as
 * soon as it is answered, over a direct URL (no registry) with Dubbo's
 * default single shared connection unless CONNECTIONS is above 0. Usage:
 * Consumer URL CALLERS REQ_BYTES SECONDS [CONNECTIONS]. Prints one line of
 * latency figures (Stats).
 */
public final class Consumer {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        int callers = Integer.parseInt(args[1]);
        int size = Integer.parseInt(args[2]);
        long secs = Long.parseLong(args[3]);
        int conns = args.length > 4 ? Integer.parseInt(args[4]) : 0;
        ApplicationConfig app = new ApplicationConfig("seed-consumer");
        app.setQosEnable(false);
        ReferenceConfig<Echo> ref = new ReferenceConfig<>();
        ref.setInterface(Echo.class);
        ref.setUrl(url);
        ref.setTimeout(120_000);
        ref.setRetries(0);
        if (conns > 0) {
            ref.setConnections(conns);
        }
        DubboBootstrap.getInstance().application(app).reference(ref).start();
        Echo echo = ref.get();
        byte[] req = new byte[size];
        Stats.run(callers, secs, () -> {
            if (echo.call(req).length != 2 * size) {
                throw new IllegalStateException("short response");
            }
        });
        System.exit(0);
    }
}

package seed;

import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.dubbo.config.ApplicationConfig;
import org.apache.dubbo.config.ProtocolConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.ServiceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;

/**
 * Dubbo provider as the seed ran it: each call sleeps 0-300 ms (mean
 * 150 ms) and returns twice the request's size. Usage: Provider HOST PORT
 * SECONDS (it exits after SECONDS).
 */
public final class Provider {
    static final AtomicLong CALLS = new AtomicLong();

    static final class Impl implements Echo {
        @Override
        public byte[] call(byte[] req) {
            try {
                Thread.sleep(ThreadLocalRandom.current().nextInt(300));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            CALLS.incrementAndGet();
            return new byte[2 * req.length];
        }
    }

    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        long secs = Long.parseLong(args[2]);
        ApplicationConfig app = new ApplicationConfig("seed-provider");
        app.setQosEnable(false);
        ProtocolConfig proto = new ProtocolConfig("dubbo", port);
        proto.setHost(host);
        ServiceConfig<Echo> svc = new ServiceConfig<>();
        svc.setInterface(Echo.class);
        svc.setRef(new Impl());
        DubboBootstrap.getInstance()
                .application(app)
                .registry(new RegistryConfig(RegistryConfig.NO_AVAILABLE))
                .protocol(proto)
                .service(svc)
                .start();
        System.out.println("listening " + host + ":" + port);
        System.out.flush();
        Thread.sleep(secs * 1000);
        System.out.println("calls " + CALLS.get());
        System.out.flush();
        System.exit(0);
    }
}

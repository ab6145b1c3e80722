package seed;

import io.grpc.ServerServiceDefinition;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.ServerCalls;
import java.net.InetSocketAddress;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * grpc-java server as the seed's provider: each call is answered after
 * 0-300 ms (mean 150 ms) with twice the request's size. Usage: Server HOST
 * PORT SECONDS (it exits after SECONDS).
 */
public final class Server {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        long secs = Long.parseLong(args[2]);
        ScheduledExecutorService timer = Executors.newScheduledThreadPool(2);
        AtomicLong calls = new AtomicLong();
        ServerServiceDefinition svc = ServerServiceDefinition.builder("seed.Echo")
                .addMethod(Method.CALL, ServerCalls.asyncUnaryCall((req, out) -> timer.schedule(() -> {
                    calls.incrementAndGet();
                    out.onNext(new byte[2 * req.length]);
                    out.onCompleted();
                }, ThreadLocalRandom.current().nextInt(300), TimeUnit.MILLISECONDS)))
                .build();
        io.grpc.Server s = NettyServerBuilder.forAddress(new InetSocketAddress(host, port))
                .maxInboundMessageSize(Method.MAX_MESSAGE)
                .addService(svc)
                .build()
                .start();
        System.out.println("listening " + host + ":" + port);
        System.out.flush();
        Thread.sleep(secs * 1000);
        System.out.println("calls " + calls.get());
        System.out.flush();
        s.shutdownNow();
        System.exit(0);
    }
}

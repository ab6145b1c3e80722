package seed;

import io.grpc.CallOptions;
import io.grpc.ManagedChannel;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;

/**
 * grpc-java client: CALLERS threads, each calling again as soon as it is
 * answered, all over one channel (one HTTP/2 connection). Usage: Client
 * HOST PORT CALLERS REQ_BYTES SECONDS. Prints one line of latency figures
 * (Stats).
 */
public final class Client {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        int callers = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        long secs = Long.parseLong(args[4]);
        ManagedChannel ch = NettyChannelBuilder.forAddress(host, port)
                .usePlaintext()
                .maxInboundMessageSize(Method.MAX_MESSAGE)
                .build();
        byte[] req = new byte[size];
        Stats.run(callers, secs, () -> {
            if (ClientCalls.blockingUnaryCall(ch, Method.CALL, CallOptions.DEFAULT, req).length != 2 * size) {
                throw new IllegalStateException("short response");
            }
        });
        ch.shutdownNow();
        System.exit(0);
    }
}

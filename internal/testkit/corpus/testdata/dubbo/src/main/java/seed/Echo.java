package seed;

/** The service: the seed's experiment, a response twice the request. */
public interface Echo {
    byte[] call(byte[] req);
}

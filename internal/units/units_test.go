package units

import (
	"testing"
	"time"
)

func TestPrint(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Bytes(16 << 10), "16K"},
		{Bytes(3.4 * (1 << 20)), "3.4M"},
		{Bytes(512), "512B"},
		{Bytes(4 << 30), "4G"},
		{Rate(93.2e6 / 8), "93.2 Mbit/s"},
		{Rate(1.25e8), "1 Gbit/s"},
		{Rate(100), "800 bit/s"},
		{Pct(0.934), "93%"},
		{Dur(1500 * time.Microsecond), "2ms"},
		{Dur(45*time.Second + 400*time.Millisecond), "45s"},
		{RTT(60 * time.Microsecond), "60µs"},
		{RTT(2500 * time.Microsecond), "2.5ms"},
		{RTT(20 * time.Millisecond), "20ms"},
		{N(1, "socket"), "1 socket"},
		{N(0, "socket"), "0 sockets"},
		{N(3, "network namespace"), "3 network namespaces"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

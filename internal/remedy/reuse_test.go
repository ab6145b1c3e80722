// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"net/netip"
	"strings"
	"testing"
)

// TestReuseFitsTheProtocol: the reuse fix speaks the destination's
// protocol, and no other's: an SMTP client is not told about HTTP pools.
func TestReuseFitsTheProtocol(t *testing.T) {
	httpWords := []string{"HTTP", "OkHttp", "requests.Session", "http.Agent"}
	dbWords := []string{"HikariCP", "psycopg_pool", "SetMaxIdleConns"}
	for _, c := range []struct {
		cmd, dst   string
		want, not  []string
		wantTarget string
	}{
		{"python3", "198.18.4.2:25", []string{"SMTP sessions", "smtplib.SMTP(\"198.18.4.2\", 25)"}, append(append([]string{"Redis"}, httpWords...), dbWords...), "python"},
		{"java", "10.0.0.5:587", []string{"SMTP sessions", "sendMessage"}, append(httpWords, dbWords...), "java"},
		{"", "10.0.0.5:465", []string{"SMTP sessions"}, httpWords, "connection-pool"},
		{"python3", "10.0.0.6:5432", []string{"database connections", "psycopg_pool"}, append(httpWords, "SMTP"), "python"},
		{"java", "10.0.0.6:3306", []string{"database connections", "HikariConfig.setMaximumPoolSize(16)"}, append(httpWords, "SMTP"), "java"},
		{"python3", "127.0.0.1:6379", []string{"Redis connections", "redis.ConnectionPool(max_connections=16)"}, append(httpWords, "SMTP", "HikariCP"), "python"},
		{"python3", "127.0.0.1:8080", []string{"HTTP keep-alive", "requests.Session"}, append(dbWords, "SMTP", "Redis"), "python"},
		{"nginx", "127.0.0.1:8081", []string{"keepalive 16"}, dbWords, "nginx"},
		{"nginx", "127.0.0.1:5432", []string{"database connections"}, []string{"upstream backend"}, "connection-pool"},
		{"", "10.0.0.7:7000", []string{"reuse connections to 10.0.0.7:7000", "a pool of at least 16"}, append(append(httpWords, dbWords...), "SMTP", "Redis"), "connection-pool"},
	} {
		f := Reuse(c.cmd, netip.MustParseAddrPort(c.dst), 16)
		all := f.Text + "\n" + f.Command
		for _, w := range c.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s to %s: want %q in %q", c.cmd, c.dst, w, all)
			}
		}
		for _, w := range c.not {
			if strings.Contains(all, w) {
				t.Errorf("%s to %s: %q does not fit: %q", c.cmd, c.dst, w, all)
			}
		}
		if f.Target != c.wantTarget {
			t.Errorf("%s to %s: target %q, want %q", c.cmd, c.dst, f.Target, c.wantTarget)
		}
	}
	if f := Reuse("", netip.AddrPort{}, 8); !strings.Contains(f.Text, "reuse connections to the service") {
		t.Errorf("unknown service: %q", f.Text)
	}
}

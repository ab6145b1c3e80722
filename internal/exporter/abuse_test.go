// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/crypto/bcrypt"
)

// abuserAddr is where the abusive clients come from: another address
// than the scraper's (loopback routes all of 127.0.0.0/8).
const abuserAddr = "127.0.0.2"

// legitTimeout is the legitimate scraper's timeout: Prometheus's default
// scrape_timeout.
const legitTimeout = 10 * time.Second

// abuse runs n abusive keep-alive clients against url for d (each its
// own connection, requests back to back; password, when set, gives each
// request's basic-auth password) while a legitimate scraper GETs url
// every 100 ms with its own keep-alive client, and returns how many of
// its scrapes failed, of how many, with the slowest's time.
func abuse(t *testing.T, url string, n int, d time.Duration, pool *x509.CertPool, user, pass string, password func() string) (failed, total int, slowest time.Duration, errs []string) {
	t.Helper()
	tr := func(from string) *http.Transport {
		d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		return &http.Transport{MaxIdleConnsPerHost: 1, TLSClientConfig: &tls.Config{RootCAs: pool}, DisableCompression: true, DialContext: d.DialContext}
	}
	legit := &http.Client{Transport: tr("127.0.0.1"), Timeout: legitTimeout}
	defer legit.CloseIdleConnections()
	scrape := func() error {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", fmt.Sprint(legitTimeout.Seconds()))
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := legit.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "tcpdoctor_collections_total 1") {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	// The scraper was scraping before the abuse began.
	if err := scrape(); err != nil {
		t.Fatalf("first scrape, before the abuse: %v", err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var abusive atomic.Int64
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: tr(abuserAddr), Timeout: 5 * time.Second}
			defer c.CloseIdleConnections()
			for !stop.Load() {
				req, _ := http.NewRequest("GET", url, nil)
				if password != nil {
					req.SetBasicAuth(user, password())
				}
				resp, err := c.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					abusive.Add(1)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // the abusers connect
	var lat []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		t0 := time.Now()
		err := scrape()
		lat = append(lat, time.Since(t0))
		total++
		if err != nil {
			failed++
			if len(errs) < 5 {
				errs = append(errs, err.Error())
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("%d abusive clients: %d abusive requests answered in %s; legitimate scrapes %d, failed %d, median %s, slowest %s",
		n, abusive.Load(), d, total, failed, lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	return failed, total, lat[len(lat)-1], errs
}

// TestScrapesServedFirst: the legitimate scraper's every scrape succeeds
// within its timeout while 16, then 200 keep-alive clients hammer
// /metrics on plain HTTP, and while 64 clients try random passwords for
// its user on TLS with basic auth (bcrypt at the least cost, 4, and at
// the default, 10). The abusers come from another address (127.0.0.2).
func TestScrapesServedFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("abusive clients for seconds")
	}
	const d = 4 * time.Second
	for _, n := range []int{16, 200} {
		t.Run(fmt.Sprintf("plain-%d", n), func(t *testing.T) {
			addr := webServer(t, Web{ListenAddress: "127.0.0.1:0"}, DefaultServerOptions())
			failed, total, _, errs := abuse(t, "http://"+addr+"/metrics", n, d, nil, "", "", nil)
			if failed > 0 {
				t.Errorf("%d of %d legitimate scrapes failed: %v", failed, total, errs)
			}
		})
	}
	for _, cost := range []int{bcrypt.MinCost, bcrypt.DefaultCost} {
		t.Run(fmt.Sprintf("tls-auth-64-cost%d", cost), func(t *testing.T) {
			dir := t.TempDir()
			certFile, keyFile, pool := tlsFiles(t, dir)
			const user, pass = "prometheus", "the-right-password"
			hash, err := bcrypt.GenerateFromPassword([]byte(pass), cost)
			if err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(dir, "web.yml")
			if err := os.WriteFile(cfg, fmt.Appendf(nil, "tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  %s: %s\n", certFile, keyFile, user, hash), 0o600); err != nil {
				t.Fatal(err)
			}
			addr := webServer(t, Web{ListenAddress: "127.0.0.1:0", ConfigFile: cfg}, DefaultServerOptions())
			random := func() string {
				b := make([]byte, 8)
				_, _ = rand.Read(b)
				return hex.EncodeToString(b)
			}
			failed, total, _, errs := abuse(t, "https://"+addr+"/metrics", 64, d, pool, user, pass, random)
			if failed > 0 {
				t.Errorf("%d of %d legitimate scrapes failed: %v", failed, total, errs)
			}
		})
	}
}

// rawClient is one TLS keep-alive connection speaking HTTP/1.1 by hand,
// so a test sees whether the server closed it.
type rawClient struct {
	c  *tls.Conn
	br *bufio.Reader
}

// dialRaw connects without starting the handshake (tls.Client starts it
// on the first request).
func dialRaw(t *testing.T, addr string, pool *x509.CertPool) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(nc, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	t.Cleanup(func() { _ = c.Close() })
	return &rawClient{c: c, br: bufio.NewReader(c)}
}

// get sends GET /metrics as user:pass and returns the status.
func (r *rawClient) get(user, pass string) (int, error) {
	_ = r.c.SetDeadline(time.Now().Add(5 * time.Second))
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	if _, err := fmt.Fprintf(r.c, "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic %s\r\n\r\n", auth); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestAuthConnectionsKept: at the connection cap with authentication
// required, connections whose requests were refused cannot close one
// that authenticated, nor a scraper's still in its TLS handshake: the
// refused ones go first.
func TestAuthConnectionsKept(t *testing.T) {
	cfg, pool := webConfig(t, "prom", "right")
	o := DefaultServerOptions()
	o.MaxConns = 3
	addr := webServer(t, Web{ListenAddress: "127.0.0.1:0", ConfigFile: cfg}, o)

	// An authenticated keep-alive connection, idle.
	authed := dialRaw(t, addr, pool)
	if code, err := authed.get("prom", "right"); code != 200 {
		t.Fatalf("authenticated scrape: %d %v", code, err)
	}
	// A scraper connected, its handshake not yet begun.
	fresh := dialRaw(t, addr, pool)
	time.Sleep(100 * time.Millisecond)
	// Clients with wrong passwords, each refused and left open, more than
	// the cap.
	for i := range 6 {
		c := dialRaw(t, addr, pool)
		if code, err := c.get("prom", fmt.Sprint("wrong", i)); code != http.StatusUnauthorized {
			t.Fatalf("wrong password: %d %v", code, err)
		}
	}
	if code, err := authed.get("prom", "right"); code != 200 {
		t.Errorf("the authenticated connection after refused ones: %d %v", code, err)
	}
	if code, err := fresh.get("prom", "right"); code != 200 {
		t.Errorf("the scraper's connection that was in its handshake: %d %v", code, err)
	}
}

// TestAuthGoodLoginRemembered: failed logins, however many, never push
// out a password that matched, and cost at most bcryptRate comparisons a
// second: past that they get 429 without one while the remembered
// password still passes.
func TestAuthGoodLoginRemembered(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a := newAuthHandler("", &web.Config{}, nil, func(error) {})
	if a.check("prom", string(hash), "right") != loginOK {
		t.Fatal("the right password refused")
	}
	// 64 clients trying wrong passwords for 2 s.
	var busy, bad, good atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(start) < 2*time.Second; i++ {
				switch a.check("prom", string(hash), fmt.Sprint("wrong-", g, "-", i)) {
				case loginBusy:
					busy.Add(1)
				case loginBad:
					bad.Add(1)
				default:
					good.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if good.Load() > 0 {
		t.Fatal("a wrong password accepted")
	}
	el := time.Since(start)
	if max := int64(bcryptRate*el.Seconds()) + bcryptBurst; bad.Load() > max {
		t.Errorf("%d bcrypt comparisons in %s, want at most %d", bad.Load(), el, max)
	}
	if busy.Load() == 0 {
		t.Errorf("no failed login refused for the rate (%d compared in %s)", bad.Load(), el)
	}
	t.Logf("64 clients, %s: %d wrong passwords compared, %d refused for the rate", el.Round(time.Millisecond), bad.Load(), busy.Load())
	// The limiter is spent: a new password waits or is refused, the
	// remembered one passes at once.
	t0 := time.Now()
	if a.check("prom", string(hash), "right") != loginOK || time.Since(t0) > 50*time.Millisecond {
		t.Errorf("the right password after %d failures: not answered from memory (%s)", bad.Load()+busy.Load(), time.Since(t0))
	}
	if n := len(a.bad); n > maxBadLogins {
		t.Errorf("%d failures remembered, want at most %d", n, maxBadLogins)
	}
}

// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
	"golang.org/x/crypto/bcrypt"
)

// TLSFiles writes a self-signed certificate for 127.0.0.1 and its key
// into dir and returns their paths and the certificate's pool.
func tlsFiles(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tcpdoctor test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// WebConfig writes an exporter-toolkit web configuration with TLS and
// one basic-auth user and returns its path and the CA pool.
func webConfig(t *testing.T, user, password string) (string, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile, pool := tlsFiles(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  %s: %s\n", certFile, keyFile, user, hash)
	path := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, pool
}

// webServer serves the test registry as `serve` does with w: the
// capped listener under the toolkit's TLS and basic auth.
func webServer(t *testing.T, w Web, o ServerOptions) string {
	t.Helper()
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	x := NewTested(goldenRules(t), Options{Clock: fixedClock})
	x.Update(readPair(t)[:1], 0)
	reg, err := NewRegistry(x.Exporter)
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.Handler(Handler(reg), "v1.2.3-test")
	if err != nil {
		t.Fatal(err)
	}
	return serveWeb(t, w, o, h, reg)
}

// serveWeb serves h on w's listener, capped by o, until the test ends.
func serveWeb(t *testing.T, w Web, o ServerOptions, h http.Handler, reg *prometheus.Registry) string {
	t.Helper()
	ln, err := w.Listen()
	if err != nil {
		t.Fatal(err)
	}
	srv, sln := NewServer(h, ln, o)
	if reg != nil {
		if err := reg.Register(sln); err != nil {
			t.Fatal(err)
		}
	}
	logs := &testns.Buffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Serve(srv, sln, logs)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

func status(t *testing.T, c *http.Client, u, user, password string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestWebTLSBasicAuth: with --web.config.file the exporter speaks only
// TLS, answers 401 without the right password, serves /metrics and the
// landing page with it; at a cap of one connection an idle TLS
// keep-alive connection is still closed for the next client, and a
// client that connects and never starts its handshake is closed after
// the header timeout.
func TestWebTLSBasicAuth(t *testing.T) {
	cfg, pool := webConfig(t, "prom", "s3cret")
	o := DefaultServerOptions()
	o.MaxConns = 1
	o.ReadHeaderTimeout = 300 * time.Millisecond
	addr := webServer(t, Web{ListenAddress: "127.0.0.1:0", ConfigFile: cfg}, o)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + addr

	for _, tc := range []struct {
		user, password string
		want           int
	}{
		{"prom", "wrong", http.StatusUnauthorized},
		{"", "", http.StatusUnauthorized},
		{"nobody", "s3cret", http.StatusUnauthorized},
		{"prom", "s3cret", http.StatusOK},
	} {
		code, body := status(t, client, base+"/metrics", tc.user, tc.password)
		if code != tc.want {
			t.Errorf("user %q password %q: status %d, want %d", tc.user, tc.password, code, tc.want)
		}
		if code == http.StatusOK && !strings.Contains(body, "tcpdoctor_http_max_connections 1") {
			t.Errorf("/metrics: no tcpdoctor_http_max_connections 1 in %d bytes", len(body))
		}
	}
	if code, body := status(t, client, base+"/", "prom", "s3cret"); code != http.StatusOK || !strings.Contains(body, "v1.2.3-test") || !strings.Contains(body, `href="/metrics"`) {
		t.Errorf("landing page: status %d:\n%s", code, body)
	}
	// Plain HTTP on the TLS port is refused.
	if resp, err := (&http.Client{Timeout: 3 * time.Second}).Get("http://" + addr + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP on the TLS port: 200 (%d bytes)", len(b))
		}
	}
	// The client above holds its TLS connection idle (keep-alive). A new
	// client must still get in: the cap closes the idle one.
	other := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code, _ := status(t, other, base+"/metrics", "prom", "s3cret"); code != http.StatusOK {
		t.Errorf("second client at cap 1: status %d", code)
	}
	// A client that connects and sends nothing (no ClientHello) is closed
	// after the header timeout, which bounds the handshake too.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	start := time.Now()
	_, err = bufio.NewReader(c).ReadByte()
	if isTimeout(err) {
		t.Errorf("silent client still open after 3 s (header timeout 300ms)")
	} else {
		t.Logf("silent client closed after %s (%v)", time.Since(start).Round(10*time.Millisecond), err)
	}
}

// TestWebTLSBusyKept: a TLS connection inside a request is not closed to
// make room (the cap finds its own connection under the TLS one): at a
// cap of one, a second client waits for the first's slow answer, and
// both are answered.
func TestWebTLSBusyKept(t *testing.T) {
	cfg, pool := webConfig(t, "prom", "s3cret")
	o := DefaultServerOptions()
	o.MaxConns = 1
	entered, release := make(chan struct{}, 2), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		fmt.Fprintln(w, "answer")
	})
	addr := serveWeb(t, Web{ListenAddress: "127.0.0.1:0", ConfigFile: cfg}, o, h, nil)
	newClient := func() *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	}
	type result struct {
		code int
		err  error
	}
	get := func(c *http.Client, done chan<- result) {
		req, _ := http.NewRequest("GET", "https://"+addr+"/metrics", nil)
		req.SetBasicAuth("prom", "s3cret")
		resp, err := c.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- result{code: resp.StatusCode}
	}
	first, second := make(chan result, 1), make(chan result, 1)
	go get(newClient(), first)
	<-entered
	go get(newClient(), second)
	time.Sleep(300 * time.Millisecond)
	close(release)
	for name, ch := range map[string]chan result{"first (busy)": first, "second": second} {
		if r := <-ch; r.err != nil || r.code != http.StatusOK {
			t.Errorf("%s client: %d %v", name, r.code, r.err)
		}
	}
}

// TestWebConfigInvalid: a web configuration the toolkit would refuse is
// refused by Validate, before serving.
func TestWebConfigInvalid(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"not-bcrypt.yml": "basic_auth_users:\n  prom: plain-text-password\n",
		"no-key.yml":     "tls_server_config:\n  cert_file: " + filepath.Join(dir, "missing.pem") + "\n",
		"yaml.yml":       "tls_server_config: [\n",
		"unknown.yml":    "tls_server_confg:\n  cert_file: x\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := (Web{ConfigFile: p}).Validate(); err == nil || !strings.Contains(err.Error(), "--web.config.file") {
			t.Errorf("%s: Validate = %v, want an error naming --web.config.file", name, err)
		}
	}
	if err := (Web{ConfigFile: filepath.Join(dir, "absent.yml")}).Validate(); err == nil {
		t.Error("absent file: no error")
	}
}

// systemdChildEnv makes the test binary a server on the socket passed as
// fd 3, as systemd passes it (serveSystemdChild).
const systemdChildEnv = "TCPDOCTOR_TEST_SYSTEMD_CHILD"

// serveSystemdChild serves on the systemd socket until killed. systemd
// sets LISTEN_PID to the service's pid between fork and exec; a test
// cannot know the child's pid before it starts, so the child sets it.
func serveSystemdChild() int {
	os.Setenv("LISTEN_PID", fmt.Sprint(os.Getpid()))
	ln, err := (Web{SystemdSocket: true}).Listen()
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "systemd socket ok") })
	srv, sln := NewServer(mux, ln, DefaultServerOptions())
	fmt.Println("ready")
	_ = (Web{SystemdSocket: true}).Serve(srv, sln, io.Discard)
	return 0
}

// TestWebSystemdSocket: --web.systemd-socket serves on the listening
// socket systemd passes as fd 3 (LISTEN_FDS=1), and refuses to start
// when none was passed.
func TestWebSystemdSocket(t *testing.T) {
	if _, err := (Web{SystemdSocket: true}).Listen(); err == nil || !strings.Contains(err.Error(), "no listening socket") {
		t.Errorf("no socket passed: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), systemdChildEnv+"=1", "LISTEN_FDS=1")
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("child: %q", line)
	}
	f.Close()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "systemd socket ok\n" {
		t.Errorf("GET on the passed socket: %d %q", resp.StatusCode, b)
	}
}

// TestLandingLinksAnswer: every link of the landing page answers (it
// once offered pprof profiles tcpdoctor does not serve).
func TestLandingLinksAnswer(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	h, err := Web{}.Handler(ok, "v1.2.3-test", Page{Path: "/history", Text: "History", Handler: ok})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	code, body := status(t, srv.Client(), srv.URL+"/", "", "")
	links := regexp.MustCompile(`href="(/[^"]*)"`).FindAllStringSubmatch(body, -1)
	if code != http.StatusOK || len(links) < 2 {
		t.Fatalf("landing page: %d, links %q", code, links)
	}
	for _, l := range links {
		if c, _ := status(t, srv.Client(), srv.URL+l[1], "", ""); c != http.StatusOK {
			t.Errorf("landing page link %s answers %d", l[1], c)
		}
	}
}

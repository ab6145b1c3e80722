// SPDX-License-Identifier: Apache-2.0

package kubenode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The cluster's addresses, inside the node's network namespace: the node
// (on lo: this kernel has no dummy links) and the Services' range.
const (
	nodeIP       = "198.18.250.1"
	serviceRange = "198.19.251.0/24"
	apiServer    = "https://127.0.0.1:6443"
)

// TestClusterHelmInstall runs the whole control plane (etcd from Debian;
// kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet
// built by scripts/k8s-build.sh) on one node, installs the chart with
// helm, and checks the DaemonSet's pod as TestKubeletChartPod checks the
// static one, and its /metrics through the Service (the API server's
// service proxy). scripts/k8s-node.sh full runs it; too slow for CI.
func TestClusterHelmInstall(t *testing.T) {
	dir := need(t, envK8sDir)
	for _, b := range []string{"etcd", "kubectl"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s: %v (Debian packages etcd-server, kubectl)", b, err)
		}
	}
	ctx := interrupted(t)
	start := time.Now()
	n := newNode(t, ctx)
	n.importTcpdoctor("k8s-test")
	n.run("ip", "-n", n.ns.Name, "addr", "add", nodeIP+"/32", "dev", "lo")
	pki := n.pki()

	n.start("etcd", "etcd", "--name", "tdk8s", "--data-dir", filepath.Join(n.work, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "tdk8s=http://127.0.0.1:2380")
	n.start("kube-apiserver", filepath.Join(dir, "kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:2379", "--secure-port", "6443", "--bind-address", "0.0.0.0",
		"--advertise-address", nodeIP, "--service-cluster-ip-range", serviceRange,
		"--client-ca-file", pki("ca.crt"), "--tls-cert-file", pki("apiserver.crt"), "--tls-private-key-file", pki("apiserver.key"),
		"--service-account-key-file", pki("sa.key"), "--service-account-signing-key-file", pki("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--kubelet-client-certificate", pki("admin.crt"), "--kubelet-client-key", pki("admin.key"),
		"--authorization-mode", "Node,RBAC", "--allow-privileged", "--cert-dir", filepath.Join(n.work, "apiserver"))
	admin := pki("admin.conf")
	n.waitFor("the API server", 180*time.Second, func() error {
		_, err := n.kubectl(admin, "get", "--raw", "/readyz")
		return err
	})
	n.start("kube-controller-manager", filepath.Join(dir, "kube-controller-manager"),
		"--kubeconfig", admin, "--authentication-kubeconfig", admin, "--authorization-kubeconfig", admin,
		"--service-account-private-key-file", pki("sa.key"), "--root-ca-file", pki("ca.crt"),
		"--cluster-signing-cert-file", pki("ca.crt"), "--cluster-signing-key-file", pki("ca.key"),
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "10257")
	n.start("kube-scheduler", filepath.Join(dir, "kube-scheduler"),
		"--kubeconfig", admin, "--authentication-kubeconfig", admin, "--authorization-kubeconfig", admin,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "10259")
	n.nodeIP = nodeIP
	n.startKubelet(filepath.Join(dir, "kubelet"), pki("kubelet.conf"))
	n.waitFor("the node to be Ready", 180*time.Second, func() error {
		out, err := n.kubectl(admin, "get", "node", n.name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if out != "True" {
			return fmt.Errorf("Ready is %q", out)
		}
		return nil
	})
	t.Logf("cluster ready in %v", time.Since(start).Round(time.Millisecond))

	historyDir := filepath.Join(n.work, "history")
	set := chartValues(historyDir)
	n.hostPaths(chartHostPaths(renderDaemonSet(t, "tcpdoctor", set)))
	args := []string{"install", "tcpdoctor", chartDir, "--namespace", "tcpdoctor", "--create-namespace", "--kubeconfig", admin}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	if out, err := n.inNode(os.Getenv(envHelm), args...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	var dsPod pod
	var ids map[string]string
	n.waitFor("the DaemonSet's pod", 180*time.Second, func() error {
		var err error
		dsPod, ids, err = n.runningWhere("tcpdoctor", func(p pod) bool { return strings.HasPrefix(p.Metadata.Name, "tcpdoctor-") })
		return err
	})
	ds := renderDaemonSet(t, "tcpdoctor", set)
	checkChartContainer(t, n, ds, ids["tcpdoctor"])
	listener, client := n.appPods()
	t.Logf("DaemonSet pod %s and application pods running in %v", dsPod.Metadata.Name, time.Since(start).Round(time.Millisecond))

	// Through the Service: the API server proxies to the Service's
	// endpoint (the pod on the node's address, host network).
	proxy := "/api/v1/namespaces/tcpdoctor/services/tcpdoctor:metrics/proxy"
	n.waitFor("/metrics through the Service naming both application pods", 180*time.Second, func() error {
		body, err := n.kubectl(admin, "get", "--raw", proxy+"/metrics")
		if err != nil {
			return err
		}
		for _, p := range []pod{listener, client} {
			c := p.Status.ContainerStatuses[0].Name
			if seriesWith([]byte(body), `pod="`+p.Metadata.Name+`"`, `namespace="`+appsNS+`"`, `container="`+c+`"`) == "" {
				return fmt.Errorf("no series with pod %q, namespace %q, container %q", p.Metadata.Name, appsNS, c)
			}
		}
		return nil
	})
	// The evidence page (serve --history answers /history?format=json)
	// through the same Service.
	n.waitFor("the listener's incident on /history through the Service", 120*time.Second, func() error {
		body, err := n.kubectl(admin, "get", "--raw", proxy+"/history?format=json")
		if err != nil {
			return err
		}
		if !strings.Contains(body, listener.Metadata.Name) {
			return fmt.Errorf("/history lists no incident of %s: %.300s", listener.Metadata.Name, body)
		}
		return nil
	})
	t.Logf("test wall time %v", time.Since(start).Round(time.Millisecond))
}

// run runs a command that must succeed.
func (n *node) run(name string, args ...string) {
	n.t.Helper()
	if out, err := exec.CommandContext(n.ctx, name, args...).CombinedOutput(); err != nil {
		n.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// inNode runs a client in the node's network namespace, where the API
// server listens.
func (n *node) inNode(bin string, args ...string) (string, error) {
	out, err := exec.CommandContext(n.ctx, "nsenter", append([]string{"--net=" + n.ns.Path, "--", bin}, args...)...).CombinedOutput()
	return string(out), err
}

func (n *node) kubectl(kubeconfig string, args ...string) (string, error) {
	out, err := n.inNode("kubectl", append([]string{"--kubeconfig", kubeconfig, "--request-timeout", "10s"}, args...)...)
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %.500s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// pki writes the cluster's certificates, keys and kubeconfigs and returns
// the path of one by name: a CA, the API server's serving certificate,
// an admin (system:masters) and the kubelet's (system:node:NAME) client
// certificates, the service accounts' signing key.
func (n *node) pki() func(string) string {
	t := n.t
	dir := filepath.Join(n.work, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	caKey := newKey(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tdk8s-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	writePEM(t, path("ca.crt"), "CERTIFICATE", caDER)
	writeKey(t, path("ca.key"), caKey)
	issue := func(name, cn string, orgs []string, server bool) {
		key := newKey(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: orgs},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(nodeIP), net.ParseIP("198.19.251.1")}
			tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, path(name+".crt"), "CERTIFICATE", der)
		writeKey(t, path(name+".key"), key)
	}
	issue("apiserver", "kube-apiserver", nil, true)
	issue("admin", "tdk8s-admin", []string{"system:masters"}, false)
	issue("kubelet", "system:node:"+n.name, []string{"system:nodes"}, false)
	writeKey(t, path("sa.key"), newKey(t))
	for _, user := range []string{"admin", "kubelet"} {
		conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: tdk8s
  cluster: {server: %q, certificate-authority: %q}
users:
- name: %s
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: tdk8s
  context: {cluster: tdk8s, user: %s}
current-context: tdk8s
`, apiServer, path("ca.crt"), user, path(user+".crt"), path(user+".key"), user)
		if err := os.WriteFile(path(user+".conf"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeKey(t *testing.T, path string, k *ecdsa.PrivateKey) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

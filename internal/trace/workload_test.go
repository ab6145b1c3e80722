// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

var podHeader = Header{Netns: "shop/web-1", Filter: "port 8080",
	Workload: &snapshot.Workload{ID: "0123456789abcdef", Container: "api", Pod: "web-1", PodNamespace: "shop"}}

// TestWorkloadNamed: a recording about a pod's container names it in
// the JSON lines (the members check's subject has), above the table and
// in the page's title; one about no workload prints as before.
func TestWorkloadNamed(t *testing.T) {
	ts := []Transfer{{Conn: 1, Local: netip.MustParseAddrPort("127.0.0.1:8080"), Remote: netip.MustParseAddrPort("127.0.0.1:40000"), Dir: Send, Bytes: 10, Dur: time.Millisecond}}
	var b bytes.Buffer
	if err := WriteJSON(&b, ts, &podHeader); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || m["pod"] != "web-1" || m["pod_namespace"] != "shop" || m["container"] != "api" || m["conn"] != float64(1) {
		t.Errorf("JSON line %s (%v): want the transfer with pod, pod_namespace and container", b.String(), err)
	}
	var plain, old bytes.Buffer
	if err := WriteJSON(&plain, ts, &Header{}); err != nil {
		t.Fatal(err)
	}
	if err := json.NewEncoder(&old).Encode(&ts[0]); err != nil {
		t.Fatal(err)
	}
	if plain.String() != old.String() {
		t.Errorf("without a workload the line changed:\n%s\nwant\n%s", plain.String(), old.String())
	}
	b.Reset()
	if err := WriteSubject(&b, &podHeader); err != nil || b.String() != "traced in netns shop/web-1: container api\n\n" {
		t.Errorf("WriteSubject = %q, %v", b.String(), err)
	}
	b.Reset()
	if err := WriteSubject(&b, &Header{Netns: "host"}); err != nil || b.Len() != 0 {
		t.Errorf("WriteSubject without a workload = %q, %v", b.String(), err)
	}
	if got := PageTitle(&podHeader); got != "port 8080 in shop/web-1 (container api)" {
		t.Errorf("PageTitle = %q", got)
	}
	host := podHeader
	host.Netns = "host" // a pod on the host's network
	if got := PageTitle(&host); !strings.Contains(got, "(pod shop/web-1 container api)") {
		t.Errorf("PageTitle = %q", got)
	}
}

// TestHeaderKeepsWorkload: the header's workload survives a recording
// written and read back.
func TestHeaderKeepsWorkload(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	h := podHeader
	h.Trace, h.Interval = Version, 10*time.Millisecond
	if err := w.Header(&h); err != nil {
		t.Fatal(err)
	}
	tr, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Header.Workload == nil || *tr.Header.Workload != *podHeader.Workload {
		t.Errorf("read back %+v", tr.Header.Workload)
	}
}

// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// TestEventPrototypes: each program checks its tracepoint's arguments as
// the kernel's BTF declares them, so a kernel whose tracepoint lacks an
// argument gets a note naming what is missing rather than a verifier
// refusal; kfree_skb reads rx_sk only where it exists.
func TestEventPrototypes(t *testing.T) {
	ptr := func(name string) btf.Type { return &btf.Pointer{Target: &btf.Struct{Name: name}} }
	ctx := btf.FuncParam{Name: "__data", Type: &btf.Pointer{Target: &btf.Void{}}}
	drop := &btf.Enum{Name: "skb_drop_reason", Size: 4}
	rst := &btf.Const{Type: &btf.Enum{Name: "sk_rst_reason", Size: 4}}
	p := func(ts ...btf.Type) []btf.FuncParam {
		out := []btf.FuncParam{ctx}
		for _, t := range ts {
			out = append(out, btf.FuncParam{Type: t})
		}
		return out
	}
	var rxSkOut uint32 // drop_has_rx_sk as checkDrop set it
	names := &reasonNames{drops: map[uint32]string{2: "NOT_SPECIFIED", 77: "TCP_LISTEN_OVERFLOW", 5: "QUEUE_PURGE"}, resets: map[uint32]string{0: "NOT_SPECIFIED"}}
	for _, tc := range []struct {
		name    string
		check   func([]btf.FuncParam, *reasonNames) error
		params  []btf.FuncParam
		ok      bool
		rxSk    uint32
		missing string
	}{
		{"kfree_skb 6.11+", checkDropSpec(t, &rxSkOut), p(ptr("sk_buff"), &btf.Pointer{Target: &btf.Void{}}, drop, ptr("sock")), true, 1, ""},
		{"kfree_skb 5.17-6.10", checkDropSpec(t, &rxSkOut), p(ptr("sk_buff"), &btf.Pointer{Target: &btf.Void{}}, drop), true, 0, ""},
		{"kfree_skb before 5.17", checkDropSpec(t, &rxSkOut), p(ptr("sk_buff"), &btf.Pointer{Target: &btf.Void{}}), false, 0, "5.17"},
		{"tcp_send_reset 6.10+", wrap(checkSendReset), p(ptr("sock"), ptr("sk_buff"), rst), true, 0, ""},
		{"tcp_send_reset before 6.10", wrap(checkSendReset), p(ptr("sock"), ptr("sk_buff")), false, 0, "6.10"},
		{"tcp_receive_reset", wrap(checkSockFirst), p(ptr("sock")), true, 0, ""},
		{"not a socket", wrap(checkSockFirst), p(ptr("sk_buff")), false, 0, "struct sock"},
	} {
		rxSkOut = 0
		err := tc.check(tc.params, names)
		if tc.ok != (err == nil) {
			t.Errorf("%s: err = %v", tc.name, err)
			continue
		}
		if err != nil && (!errors.Is(err, ErrNotSupported) || !contains(err.Error(), tc.missing)) {
			t.Errorf("%s: err = %v, want not supported naming %q", tc.name, err, tc.missing)
		}
		if err == nil && rxSkOut != tc.rxSk {
			t.Errorf("%s: drop_has_rx_sk = %d, want %d", tc.name, rxSkOut, tc.rxSk)
		}
	}
}

func checkDropSpec(t *testing.T, out *uint32) func([]btf.FuncParam, *reasonNames) error {
	return func(params []btf.FuncParam, names *reasonNames) error {
		spec, err := loadEvents()
		if err != nil {
			t.Fatal(err)
		}
		if err := checkDrop(params, spec, names); err != nil {
			return err
		}
		return spec.Variables[eventsVarDropHasRxSk].Get(out)
	}
}

func wrap(f func([]btf.FuncParam, *ebpf.CollectionSpec, *reasonNames) error) func([]btf.FuncParam, *reasonNames) error {
	return func(params []btf.FuncParam, names *reasonNames) error { return f(params, nil, names) }
}

func contains(s, sub string) bool { return sub == "" || strings.Contains(s, sub) }

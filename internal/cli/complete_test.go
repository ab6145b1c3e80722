// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// completed runs `tcpdoctor __complete ARGS...` and returns the candidates
// (each line before the directive, description cut).
func completed(t *testing.T, e *Env, args ...string) []string {
	t.Helper()
	var out, errb bytes.Buffer
	if e == nil {
		code, o, _ := run(t, append([]string{"__complete"}, args...)...)
		if code != ExitOK {
			t.Fatalf("__complete %q: exit %d", args, code)
		}
		out.WriteString(o)
	} else {
		e.Stdout, e.Stderr = &out, &errb
		if code := Main(append([]string{"__complete"}, args...), e); code != ExitOK {
			t.Fatalf("__complete %q: exit %d: %s", args, code, errb.String())
		}
	}
	var got []string
	for _, l := range strings.Split(out.String(), "\n") {
		if l == "" || strings.HasPrefix(l, ":") {
			continue
		}
		got = append(got, strings.SplitN(l, "\t", 2)[0])
	}
	return got
}

func TestCompletion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // every one of these, and nothing not starting with the typed text
		not  []string
	}{
		{[]string{"explain", ""}, []string{"listen-overflow", "rwnd-limited", "port-exhaustion"}, nil},
		{[]string{"explain", "rw"}, []string{"rwnd-limited"}, []string{"listen-overflow"}},
		{[]string{"explain", "rwnd-limited", ""}, nil, []string{"rwnd-limited"}},
		{[]string{"check", "--fail-on", ""}, []string{"info", "warning", "critical"}, nil},
		{[]string{"check", "--rule", "listen-overflow,"}, []string{"listen-overflow,port-exhaustion"}, []string{"listen-overflow,listen-overflow"}},
		{[]string{"history", "--rule", "time-"}, []string{"time-wait-churn"}, nil},
		{[]string{"watch", "--kind", ""}, []string{"failed-connect", "listen-overflow", "reset-sent"}, nil},
		{[]string{"sockets", "--state", "time"}, []string{"time-wait"}, []string{"listen"}},
		{[]string{"trace", "--bpf", ""}, []string{"auto", "on", "off"}, nil},
	} {
		got := completed(t, nil, tc.args...)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("__complete %q: %q missing from %q", tc.args, w, got)
			}
		}
		for _, n := range tc.not {
			if slices.Contains(got, n) {
				t.Errorf("__complete %q: %q offered in %q", tc.args, n, got)
			}
		}
		if typed := tc.args[len(tc.args)-1]; typed != "" {
			for _, g := range got {
				if !strings.HasPrefix(g, typed) {
					t.Errorf("__complete %q: %q does not start with %q", tc.args, g, typed)
				}
			}
		}
	}
}

// TestCompletionNetns: --netns completes a namespace `ip netns` knows, in
// every command that takes it.
func TestCompletionNetns(t *testing.T) {
	ns := testns.New(t, "compl")
	for _, cmd := range []string{"check", "sockets", "trace", "record", "watch"} {
		if got := completed(t, nil, cmd, "--netns", ns.Name[:len(ns.Name)-2]); !slices.Contains(got, ns.Name) {
			t.Errorf("%s --netns: %s not in %q", cmd, ns.Name, got)
		}
	}
}

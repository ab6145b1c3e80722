// SPDX-License-Identifier: Apache-2.0

// Package testchart renders the Helm chart with `helm template` for tests
// (the release's chart checks, the real-node test) and walks what it
// rendered.
package testchart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"testing"

	"go.yaml.in/yaml/v2"
)

// Render runs helm template on chart in namespace with each --set and
// returns the objects it rendered by kind.
func Render(t testing.TB, helm, chart, namespace string, set ...string) map[string][]map[any]any {
	t.Helper()
	args := []string{"template", "tcpdoctor", chart, "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("helm %v: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	objs := map[string][]map[any]any{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o map[any]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("helm template output: %v", err)
		}
		if o != nil {
			objs[fmt.Sprint(o["kind"])] = append(objs[fmt.Sprint(o["kind"])], o)
		}
	}
	return objs
}

// At walks a parsed object by keys and list indexes; nil where the path
// leads nowhere.
func At(o any, path ...any) any {
	for _, k := range path {
		switch v := o.(type) {
		case map[any]any:
			o = v[k]
		case []any:
			i, ok := k.(int)
			if !ok || i >= len(v) {
				return nil
			}
			o = v[i]
		default:
			return nil
		}
	}
	return o
}

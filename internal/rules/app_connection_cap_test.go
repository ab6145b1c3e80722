package rules

import (
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestAppCapUnknown: without the servers' limits read the rule says
// unknown and why, never healthy.
func TestAppCapUnknown(t *testing.T) {
	snaps := readSnaps(t, "testdata/app-connection-cap/fires.jsonl")
	cur := snaps[len(snaps)-1]
	cur.AppCaps = nil
	for _, c := range []struct {
		errs []snapshot.SourceError
		want string
	}{
		{nil, "not collected"},
		{[]snapshot.SourceError{{Source: snapshot.SourceAppCaps, Err: "nginx pid 10862: config /etc/nginx/nginx.conf: permission denied"}}, "permission denied"},
	} {
		cur.Errors = c.errs
		_, err := checkAppCap(diag.NewInput(nil, cur, diag.Options{}))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("errors %v: got %v, want unknown saying %q", c.errs, err, c.want)
		}
	}
}

// TestAppCapOneSample: at the cap in a single sample nobody can be seen
// turned away: info, with the fix.
func TestAppCapOneSample(t *testing.T) {
	snaps := readSnaps(t, "testdata/app-connection-cap/fires.jsonl")
	fs, err := checkAppCap(diag.NewInput(nil, snaps[len(snaps)-1], diag.Options{}))
	if err != nil || len(fs) != 1 {
		t.Fatalf("findings %+v, err %v", fs, err)
	}
	f := fs[0]
	if f.Severity != diag.Info || !strings.Contains(f.Summary, "nobody was seen turned away") {
		t.Errorf("one sample: %s %q", f.Severity, f.Summary)
	}
	if len(f.Fixes) == 0 || !strings.Contains(f.Fixes[0].Command, "worker_connections 512") {
		t.Errorf("fix %+v, want worker_connections 512 (double 256: nothing turned away to add)", f.Fixes)
	}
}

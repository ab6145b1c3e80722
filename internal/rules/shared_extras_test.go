// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestFixturesSharedExtras: `check` keeps a connection's tcp_info and
// meminfo once when they did not change between its two samples
// (snapshot.Store.KeepSame through collect.Collector.Base). Every rule
// must judge every fixture the same either way; last_data_* and
// last_ack_* are then the first sample's (as old as the window less), so
// each fixture is also run with its idle connections' ages set apart.
func TestFixturesSharedExtras(t *testing.T) {
	files, err := filepath.Glob("testdata/*/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	shared, sharedInfo := 0, 0
	for _, path := range files {
		snaps := readSnaps(t, path)
		if len(snaps) < 2 {
			continue
		}
		prev := snaps[0]
		cur, lean, n, ni := keptSame(prev, snaps[len(snaps)-1])
		shared += n
		sharedInfo += ni
		for _, r := range All() {
			want, got := findingsJSON(t, r, prev, cur), findingsJSON(t, r, prev, lean)
			if want != got {
				t.Errorf("%s, rule %s: findings differ with %d shared extras:\nfull %s\nshared %s", path, r.ID, n, want, got)
			}
		}
	}
	if shared == 0 || sharedInfo == 0 {
		t.Errorf("%d sockets share an extra, %d their tcp_info: the test compares nothing", shared, sharedInfo)
	}
	t.Logf("%d fixtures, %d sockets sharing the first sample's extras, %d of them its tcp_info", len(files), shared, sharedInfo)
}

// keptSame returns cur as the kernel would show it a window after prev
// (connections that moved nothing have aged by a second) and that sample
// as the collector keeps it with prev as its base; n counts the sockets
// sharing an extra, ni those sharing their tcp_info.
func keptSame(prev, cur *snapshot.Snapshot) (aged, lean *snapshot.Snapshot, n, ni int) {
	byCookie := map[uint64]*snapshot.Socket{}
	for i := range prev.Sockets {
		byCookie[prev.Sockets[i].Cookie] = &prev.Sockets[i]
	}
	a, l := *cur, *cur
	a.Sockets = make([]snapshot.Socket, len(cur.Sockets))
	l.Sockets = make([]snapshot.Socket, len(cur.Sockets))
	var st snapshot.Store
	var tb, bb snapshot.TCPInfo
	for i := range cur.Sockets {
		sk := cur.Sockets[i]
		b := byCookie[sk.Cookie]
		var bi *snapshot.TCPInfo
		if b != nil {
			bi = b.TCP(&bb)
		}
		if ti := sk.TCP(&tb); ti != nil && bi != nil && snapshot.SameInfo(ti, bi) {
			ti := *bi
			ti.LastDataSent += 1000
			ti.LastDataRecv += 1000
			ti.LastAckSent += 1000
			ti.LastAckRecv += 1000
			sk.Info = snapshot.TCPOf(&ti)
		}
		a.Sockets[i] = st.Keep(&sk)
		var bw *snapshot.Was
		if b != nil {
			w := b.Was()
			bw = &w
		}
		l.Sockets[i] = st.KeepSame(&sk, bw)
		sharesInfo := b != nil && l.Sockets[i].SharesTCP(bw)
		if sharesInfo {
			ni++
		}
		if sharesInfo || b != nil && l.Sockets[i].Mem == b.Mem && b.Mem != nil {
			n++
		}
	}
	return &a, &l, n, ni
}

// readSnaps reads every snapshot of a fixture file.
func readSnaps(t *testing.T, path string) []*snapshot.Snapshot {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snaps, err := snapshot.ReadAll(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return snaps
}

func findingsJSON(t *testing.T, r diag.Rule, prev, cur *snapshot.Snapshot) string {
	t.Helper()
	res := runRule(r, prev, cur)
	res.Sort()
	b, err := json.Marshal(struct {
		F []diag.Finding
		U []diag.Unknown
	}{res.Findings, res.Unknown})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

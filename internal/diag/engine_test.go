package diag

import (
	"errors"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func TestRunUnknownAndPanics(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	prev := &snapshot.Snapshot{Taken: t0, Netns: snapshot.Netns{Name: "n1"}, Counters: map[string]int64{"A.b": 1}}
	cur := &snapshot.Snapshot{Taken: t0.Add(5 * time.Second), Netns: snapshot.Netns{Name: "n1"}, Counters: map[string]int64{"A.b": 4}}
	rules := []Rule{
		{ID: "delta", NeedsDelta: true, Check: func(in *Input) ([]Finding, error) {
			d, ok := in.CounterDelta("A.b")
			if !ok {
				return nil, errors.New("no counter")
			}
			if d != 3 || in.Window() != 5*time.Second {
				t.Errorf("delta %d window %v", d, in.Window())
			}
			return []Finding{{Severity: Warning, Summary: "moved"}}, nil
		}},
		{ID: "boom", Check: func(*Input) ([]Finding, error) { panic("bad rule") }},
		{ID: "missing", Check: func(*Input) ([]Finding, error) { return nil, Unknownf("counter %s absent", "X.y") }},
		{ID: "crit", Check: func(*Input) ([]Finding, error) { return []Finding{{Severity: Critical}}, nil }},
	}
	var res Result
	Run(rules, NewInput(prev, cur, Options{}), &res)
	res.Sort()
	if len(res.Findings) != 2 || res.Findings[0].Rule != "crit" || res.Findings[1].Rule != "delta" || res.Findings[1].Subject.Netns != "n1" {
		t.Errorf("findings %+v", res.Findings)
	}
	if res.Worst() != Critical {
		t.Errorf("worst %v", res.Worst())
	}
	if len(res.Unknown) != 2 || res.Unknown[0].Rule != "boom" || res.Unknown[1].Reason != "counter X.y absent" {
		t.Errorf("unknown %+v", res.Unknown)
	}

	var one Result
	Run(rules[:1], NewInput(nil, cur, Options{}), &one)
	if len(one.Unknown) != 1 || len(one.Findings) != 0 {
		t.Errorf("delta rule without a previous sample: %+v", one)
	}
}

func TestSeverityText(t *testing.T) {
	for _, s := range []Severity{Info, Warning, Critical} {
		b, _ := s.MarshalText()
		var back Severity
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("%v round trip: %v %v", s, back, err)
		}
	}
	if _, err := ParseSeverity("loud"); err == nil {
		t.Error("unknown severity accepted")
	}
}

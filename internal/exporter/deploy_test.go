package exporter

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

const deployDir = "../../deploy"

var (
	metricRe = regexp.MustCompile(`\btcpdoctor_[a-z_]+`)
	fqNameRe = regexp.MustCompile(`fqName: "([^"]+)"`)
)

// exported returns the name of every family the exporter can emit.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	descs := newDescs().all()
	// What serve registers beside the exporter: its cost and build.
	ch := make(chan *prometheus.Desc, 16)
	NewCost(nil, "").Describe(ch)
	NewBuildInfo(version.Info{}).Describe(ch)
	close(ch)
	for d := range ch {
		descs = append(descs, d)
	}
	for _, d := range descs {
		m := fqNameRe.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		out[m[1]] = true
	}
	return out
}

// checkMetrics fails for any tcpdoctor_ metric in expr the exporter does
// not export, and for an expr with none.
func checkMetrics(t *testing.T, where, expr string, have map[string]bool) {
	t.Helper()
	names := metricRe.FindAllString(expr, -1)
	if len(names) == 0 {
		t.Errorf("%s: %q uses no tcpdoctor metric", where, expr)
	}
	for _, n := range names {
		if !have[n] {
			t.Errorf("%s: %q uses %s, which tcpdoctor serve does not export", where, expr, n)
		}
	}
}

type dashPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "tcpdoctor.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string      `json:"title"`
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("tcpdoctor.json is not valid JSON: %v", err)
	}
	have := exported(t)
	var exprs []string
	var titles []string
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			titles = append(titles, p.Title)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				checkMetrics(t, "panel "+p.Title, tg.Expr, have)
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			checkMetrics(t, "variable", q, have)
		}
	}
	all := strings.Join(titles, "\n")
	for _, c := range []string{"C1", "C2", "C3", "C4", "C5", "Active findings", "Sources up"} {
		if !strings.Contains(all, c) {
			t.Errorf("no panel for %s", c)
		}
	}
	// Every query must parse as PromQL: promtool checks them as recording rules.
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: PromQL syntax of the panels not checked")
		return
	}
	var sb strings.Builder
	sb.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	r := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*", "$netns", ".*")
	for i, e := range exprs {
		q, _ := json.Marshal(r.Replace(e))
		fmt.Fprintf(&sb, "      - record: panel_query_%d\n        expr: %s\n", i, q)
	}
	f := filepath.Join(t.TempDir(), "dash-rules.yml")
	if err := os.WriteFile(f, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("dashboard queries do not parse: %v\n%s", err, out)
	}
}

func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "tcpdoctor-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	have := exported(t)
	ids := map[string]bool{}
	for _, r := range rules.All() {
		ids[r.ID] = true
	}
	specific := map[string]bool{}
	var catchAll string
	for _, line := range strings.Split(string(b), "\n") {
		expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr: ")
		if !ok {
			continue
		}
		checkMetrics(t, "alert", expr, have)
		if m := regexp.MustCompile(`rule="([a-z0-9-]+)"`).FindStringSubmatch(expr); m != nil {
			if !ids[m[1]] {
				t.Errorf("alert for rule %q, which tcpdoctor does not have", m[1])
			}
			specific[m[1]] = true
		}
		if m := regexp.MustCompile(`rule!~"([^"]+)"`).FindStringSubmatch(expr); m != nil {
			catchAll = m[1]
		}
	}
	// The generic alert must exclude exactly the rules with their own alert.
	var names []string
	for id := range specific {
		names = append(names, id)
	}
	sort.Strings(names)
	ex := strings.Split(catchAll, "|")
	sort.Strings(ex)
	if strings.Join(ex, "|") != strings.Join(names, "|") {
		t.Errorf("generic alert excludes %v, specific alerts exist for %v", ex, names)
	}
	for id := range ids {
		if !specific[id] {
			t.Logf("rule %s has no alert of its own (covered by TCPDoctorFinding when critical)", id)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus): promtool test rules not run")
	}
	cmd := exec.Command(promtool, "test", "rules", "tcpdoctor-alerts.test.yml")
	cmd.Dir = filepath.Join(deployDir, "prometheus")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}

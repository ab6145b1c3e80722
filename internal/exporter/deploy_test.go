// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v2"

	"github.com/tcpdoctor/tcpdoctor/internal/containers"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

const deployDir = "../../deploy"

var (
	metricRe   = regexp.MustCompile(`\btcpdoctor_[a-z_]+`)
	fqNameRe   = regexp.MustCompile(`fqName: "([^"]+)"`)
	varLabelRe = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	legendRe   = regexp.MustCompile(`\{\{\s*([a-zA-Z_]+)\s*\}\}`)
	byRe       = regexp.MustCompile(`^\s*(?:sum|count|max|min|avg) by \(([^)]*)\)`)
	labelVarRe = regexp.MustCompile(`^label_values\((tcpdoctor_[a-z_]+)(?:\{[^}]*\})?,\s*([a-z_]+)\)$`)
)

// servedDescs are the exporter's families and those serve registers
// beside it: its cost and build.
func servedDescs() []*prometheus.Desc {
	descs := newDescs().all()
	ch := make(chan *prometheus.Desc, 16)
	NewCost(nil, "").Describe(ch)
	NewBuildInfo(version.Info{}).Describe(ch)
	close(ch)
	for d := range ch {
		descs = append(descs, d)
	}
	return descs
}

// labelsOfFamilies returns each exported family's label names, with the
// instance and job labels Prometheus adds to every series.
func labelsOfFamilies(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for _, d := range servedDescs() {
		n := fqNameRe.FindStringSubmatch(d.String())
		l := varLabelRe.FindStringSubmatch(d.String())
		if n == nil || l == nil {
			t.Fatalf("no name or labels in %s", d)
		}
		m := map[string]bool{"instance": true, "job": true}
		for _, v := range strings.Split(l[1], ",") {
			if v = strings.TrimSpace(v); v != "" {
				m[v] = true
			}
		}
		out[n[1]] = m
	}
	return out
}

// checkLegend fails for a legend naming a label the query's result
// cannot have: one its outer aggregation drops, or one no family in it
// has (Grafana would print it empty).
func checkLegend(t *testing.T, where, expr, legend string, fams map[string]map[string]bool) {
	t.Helper()
	for _, m := range legendRe.FindAllStringSubmatch(legend, -1) {
		label := m[1]
		if by := byRe.FindStringSubmatch(expr); by != nil {
			if !slices.Contains(strings.Split(strings.ReplaceAll(by[1], " ", ""), ","), label) {
				t.Errorf("%s: legend %q names %s, which %q aggregates away", where, legend, label, expr)
			}
			continue
		}
		found := false
		for _, name := range metricRe.FindAllString(expr, -1) {
			found = found || fams[name][label]
		}
		if !found {
			t.Errorf("%s: legend %q names %s, which no family in %q has", where, legend, label, expr)
		}
	}
}

// exported returns the name of every family the exporter can emit.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, d := range servedDescs() {
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
		Expr   string `json:"expr"`
		Legend string `json:"legendFormat"`
	} `json:"targets"`
	Panels      []dashPanel `json:"panels"`
	FieldConfig struct {
		Defaults struct {
			Links []struct {
				URL string `json:"url"`
			} `json:"links"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
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
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("tcpdoctor.json is not valid JSON: %v", err)
	}
	have := exported(t)
	fams := labelsOfFamilies(t)
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
				checkLegend(t, "panel "+p.Title, tg.Expr, tg.Legend, fams)
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			checkMetrics(t, "variable", q, have)
			if m := labelVarRe.FindStringSubmatch(q); m == nil || !fams[m[1]][m[2]] {
				t.Errorf("variable %s: %q is not label_values of a label the family has", v.Name, q)
			}
		}
	}
	// The pod filter: a pod's namespace and name as variables, and every
	// query that filters by netns filters by them too.
	for _, v := range []string{"namespace", "pod"} {
		if !vars[v] {
			t.Errorf("no %s variable", v)
		}
	}
	for _, e := range exprs {
		if strings.Contains(e, `netns=~"$netns"`) && (strings.Count(e, `netns=~"$netns"`) != strings.Count(e, `pod=~"$pod"`) ||
			strings.Count(e, `netns=~"$netns"`) != strings.Count(e, `namespace=~"$namespace"`)) {
			t.Errorf("%q filters by netns but not by pod and namespace", e)
		}
	}
	// Every findings panel links the evidence pages of serve --history:
	// a row its incident's page, a series its rule's timeline.
	var links func(ps []dashPanel)
	links = func(ps []dashPanel) {
		for _, p := range ps {
			finding := false
			for _, tg := range p.Targets {
				finding = finding || strings.Contains(tg.Expr, "tcpdoctor_finding{")
			}
			if finding {
				ok := false
				for _, l := range p.FieldConfig.Defaults.Links {
					ok = ok || strings.HasPrefix(l.URL, "${evidence_scheme}://") &&
						(strings.Contains(l.URL, "/history/incident?rule=${__data.fields.rule") || strings.Contains(l.URL, "/history?since="))
				}
				if !ok {
					t.Errorf("findings panel %q has no data link to the evidence pages: %+v", p.Title, p.FieldConfig.Defaults.Links)
				}
			}
			links(p.Panels)
		}
	}
	links(d.Panels)
	if !vars["evidence_scheme"] {
		t.Error("no evidence_scheme variable")
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
	r := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*", "$netns", ".*", "$namespace", ".*", "$pod", ".*")
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

// TestDaemonSetMounts: the DaemonSet mounts, read-only and at the host's
// own path, every directory name resolution reads by default
// (containers.DefaultRoots; /proc comes with hostPID), so no flag is
// needed; /run/netns with HostToContainer propagation.
func TestDaemonSetMounts(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	r := containers.DefaultRoots()
	if !strings.Contains(text, "hostPID: true") || r.Proc != "/proc" {
		t.Errorf("no hostPID: /proc/PID/cgroup of the host's processes is not readable")
	}
	mount := regexp.MustCompile(`(?m)^\s+- name: (\S+)\n\s+mountPath: (\S+)\n\s+readOnly: true\n(\s+mountPropagation: (\S+)\n)?`)
	got := map[string]string{}
	for _, m := range mount.FindAllStringSubmatch(text, -1) {
		got[m[2]] = m[4]
		if !strings.Contains(text, "path: "+m[2]+"\n") {
			t.Errorf("mount %s is not the host's path %s", m[1], m[2])
		}
	}
	for path, prop := range map[string]string{
		filepath.Join(r.ContainerdState, "io.containerd.runtime.v2.task"): "",
		r.Runc:                                "",
		filepath.Join(r.Docker, "containers"): "",
		filepath.Join(r.Storage, "overlay-containers"): "",
		"/run/netns": "HostToContainer",
	} {
		p, ok := got[path]
		if !ok {
			t.Errorf("%s is not mounted read-only (mounted: %v)", path, got)
		} else if p != prop {
			t.Errorf("%s: propagation %q, want %q", path, p, prop)
		}
	}
	if _, ok := got[r.ContainerdState]; ok {
		t.Errorf("%s mounted whole: it holds containerd's API socket", r.ContainerdState)
	}
}

// TestAlertEvidence: every alert on a finding carries an evidence
// annotation, the URL of its incident's page on the instance that fired
// (built from tcpdoctor_history_pages_info, which serve --history
// exports), and the promtool tests (TestAlertRules runs them) expect it
// rendered for each such alert.
func TestAlertEvidence(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "tcpdoctor-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	tb, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "tcpdoctor-alerts.test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			Alerts []struct {
				Name string `yaml:"alertname"`
				Exp  []struct {
					Annotations map[string]string `yaml:"exp_annotations"`
				} `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(tb, &tf); err != nil {
		t.Fatal(err)
	}
	rendered := map[string]bool{}
	for _, g := range tf.Tests {
		for _, a := range g.Alerts {
			for _, e := range a.Exp {
				if strings.Contains(e.Annotations["evidence"], "/history/incident?rule=") {
					rendered[a.Name] = true
				}
			}
		}
	}
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if !strings.HasPrefix(r.Expr, "tcpdoctor_finding{") {
				continue
			}
			n++
			ev := r.Annotations["evidence"]
			if !strings.Contains(ev, "tcpdoctor_history_pages_info") || !strings.Contains(ev, "/history/incident?") {
				t.Errorf("%s: evidence annotation %q does not link its incident's page", r.Alert, ev)
			}
			if !rendered[r.Alert] {
				t.Errorf("%s: no promtool test expects its evidence URL rendered", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("no alert on tcpdoctor_finding found")
	}
}

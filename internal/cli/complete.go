// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/watch"
)

// complete gives every flag and argument whose values tcpdoctor knows its
// candidates, in one place, through cobra's `__complete` (which the bash,
// zsh and fish scripts call). A flag is completed by its name wherever it
// appears; a list flag (--rule a,b) completes the item after the last
// comma. Candidates that need the host (namespaces, pods, containers) are
// what this process can see: as root, all of them.
func complete(root *cobra.Command, e *Env) {
	byFlag := map[string]cobra.CompletionFunc{
		"rule":      fixed(rules.IDs()...),
		"fail-on":   fixed("info", "warning", "critical"),
		"severity":  fixed("info", "warning", "critical"),
		"state":     fixed(stateNames()...),
		"kind":      fixed(watch.Kinds()...),
		"bpf":       fixed("auto", "on", "off"),
		"netns":     e.completeNetns,
		"pod":       e.completePods,
		"container": e.completeContainers,
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			fn, ok := byFlag[f.Name]
			if !ok || f.Value.Type() == "bool" {
				return
			}
			if _, has := c.GetFlagCompletionFunc(f.Name); has {
				return
			}
			if strings.HasSuffix(f.Value.Type(), "Slice") {
				fn = listItem(fn)
			}
			_ = c.RegisterFlagCompletionFunc(f.Name, fn)
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if c, _, err := root.Find([]string{"explain"}); err == nil && c != root {
		c.ValidArgsFunction = firstArg(fixed(rules.IDs()...))
	}
}

// fixed completes from names, those starting with what was typed.
func fixed(names ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		for _, n := range names {
			if strings.HasPrefix(n, typed) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// listItem completes the item after the last comma of a list flag's value,
// leaving out the items already given.
func listItem(fn cobra.CompletionFunc) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
		i := strings.LastIndexByte(typed, ',')
		if i < 0 {
			return fn(c, args, typed)
		}
		head := typed[:i+1]
		given := strings.Split(typed[:i], ",")
		items, dir := fn(c, args, typed[i+1:])
		var out []cobra.Completion
		for _, it := range items {
			if !slices.Contains(given, it) {
				out = append(out, head+it)
			}
		}
		return out, dir | cobra.ShellCompDirectiveNoSpace
	}
}

// firstArg completes the first argument with fn and nothing after it.
func firstArg(fn cobra.CompletionFunc) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return fn(c, args, typed)
	}
}

// stateNames are the socket states as --state takes them (lower case).
func stateNames() []string {
	var out []string
	for st := snapshot.Established; st <= snapshot.BoundInactive; st++ {
		out = append(out, strings.ToLower(st.String()))
	}
	return out
}

// completeNetns lists the namespaces --netns takes: those `ip netns`
// names and, where named by what holds them, pods and containers.
func (e *Env) completeNetns(_ *cobra.Command, _ []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
	all, _ := e.finder().All() // a partial list still completes what it can
	var names []string
	for _, ns := range all {
		if ns.Name != "" && !strings.HasPrefix(ns.Name, "pid:") {
			names = append(names, ns.Name)
		}
	}
	return fixed(names...)(nil, nil, typed)
}

// completePods lists the Kubernetes pods of this host's processes as
// NAMESPACE/NAME.
func (e *Env) completePods(_ *cobra.Command, _ []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return e.completeWorkloads(typed, func(w snapshot.Workload) string {
		if w.Pod == "" {
			return ""
		}
		return w.PodNamespace + "/" + w.Pod
	})
}

// completeContainers lists the containers of this host's processes by name.
func (e *Env) completeContainers(_ *cobra.Command, _ []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return e.completeWorkloads(typed, func(w snapshot.Workload) string {
		if w.Sandbox {
			return ""
		}
		return w.ContainerName()
	})
}

func (e *Env) completeWorkloads(typed string, name func(snapshot.Workload) string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if e.Workloads == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	procs, _ := e.Workloads.Processes()
	seen := map[string]bool{}
	var names []string
	for _, w := range procs {
		if n := name(w); n != "" && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return fixed(names...)(nil, nil, typed)
}

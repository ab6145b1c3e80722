// SPDX-License-Identifier: Apache-2.0

// Package helptext fits a cobra command tree's --help to a terminal's
// width: descriptions reflowed, flag usages wrapped under their column.
package helptext

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Width is the width help is fitted to: the classic terminal's.
const Width = 80

// usage is cobra's default usage template with the flag usages wrapped
// to %d columns and a shorter closing line.
const usage = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsagesWrapped %[1]d | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsagesWrapped %[1]d | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more about a command.{{end}}
`

// Fit makes the help of root and every command below it fit width
// columns: the usage template wraps flag usages, and each command's
// long description is reflowed (paragraphs are separated by blank lines;
// a paragraph with an indented line is kept as written). Command
// summaries (Short) are not wrapped in command lists: keep them short.
func Fit(root *cobra.Command, width int) {
	root.SetUsageTemplate(fmt.Sprintf(usage, width))
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		fitLong(c, width)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	// Commands cobra adds when it runs (completion, help) are fitted as
	// their help is printed.
	help := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		fitLong(c, width)
		help(c, args)
	})
}

// fitLong reflows c's description; one left empty becomes the summary,
// which help prints then.
func fitLong(c *cobra.Command, width int) {
	if c.Long == "" {
		c.Long = c.Short
	}
	c.Long = Reflow(c.Long, width)
}

// Reflow breaks each paragraph of s at spaces into lines of at most
// width characters (a longer word stays whole on its own line).
// Paragraphs are separated by blank lines; one with a line that starts
// with a space or tab (an example, a list) is left as it is.
func Reflow(s string, width int) string {
	if s == "" {
		return s
	}
	paras := strings.Split(s, "\n\n")
	for i, p := range paras {
		if indented(p) {
			continue
		}
		var b strings.Builder
		n := 0
		for _, w := range strings.Fields(p) {
			l := len([]rune(w))
			switch {
			case n == 0:
			case n+1+l > width:
				b.WriteByte('\n')
				n = 0
			default:
				b.WriteByte(' ')
				n++
			}
			b.WriteString(w)
			n += l
		}
		paras[i] = b.String()
	}
	return strings.Join(paras, "\n\n")
}

// indented reports whether a line of p starts with a space or tab.
func indented(p string) bool {
	for _, l := range strings.Split(p, "\n") {
		if strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") {
			return true
		}
	}
	return false
}

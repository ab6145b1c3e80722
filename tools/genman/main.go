// SPDX-License-Identifier: Apache-2.0

// Command genman writes the man pages of tcpdoctor and tcpdoctor-lab,
// generated from their cobra command trees, and their bash, zsh and fish
// completions (scripts/release.sh runs it; docs/release.md).
//
//	go run ./genman -version v1.2.3 -out DIR
//
// writes DIR/man/man1/tcpdoctor*.1 (tcpdoctor-lab*.1 among them) and
// DIR/completions/{tcpdoctor.bash,_tcpdoctor,tcpdoctor.fish} and the same
// three for tcpdoctor-lab. The pages' date is SOURCE_DATE_EPOCH's,
// which it requires, so two runs give the same bytes.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/tcpdoctor/tcpdoctor/internal/cli"
	"github.com/tcpdoctor/tcpdoctor/internal/labcli"
	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "genman: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("genman", flag.ContinueOnError)
	ver := fs.String("version", "", "the release's version (v1.2.3)")
	out := fs.String("out", "", "directory to write man/ and completions/ into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ver == "" || *out == "" {
		return errors.New("-version and -out are required")
	}
	epoch, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	if err != nil {
		return fmt.Errorf("SOURCE_DATE_EPOCH: %w (the commit's time, for the pages' date)", err)
	}
	date := time.Unix(epoch, 0).UTC()
	for _, root := range []*cobra.Command{
		cli.NewRoot(&cli.Env{Stdout: io.Discard, Stderr: io.Discard, Build: version.Info{Version: *ver}}),
		labcli.NewRoot(&labcli.Env{Stdout: io.Discard, Stderr: io.Discard, Build: version.Info{Version: *ver}}),
	} {
		if err := write(root, *ver, date, *out); err != nil {
			return err
		}
	}
	return nil
}

// write writes root's man pages (one per command, titled by cobra
// TCPDOCTOR-CHECK, TCPDOCTOR-LAB-RUN) and its three completions, named by
// the command (tcpdoctor.bash, _tcpdoctor-lab).
func write(root *cobra.Command, ver string, date time.Time, out string) error {
	name := root.Name()
	root.InitDefaultCompletionCmd()
	// Linux shells only: no PowerShell page or completion in Linux packages.
	if comp, _, err := root.Find([]string{"completion"}); err == nil && comp != root {
		for _, c := range comp.Commands() {
			if c.Name() == "powershell" {
				comp.RemoveCommand(c)
			}
		}
	}
	root.DisableAutoGenTag = true
	man := filepath.Join(out, "man", "man1")
	if err := os.MkdirAll(man, 0o755); err != nil {
		return err
	}
	// No Title: cobra titles each page by its command (TCPDOCTOR-CHECK).
	hdr := &doc.GenManHeader{Section: "1", Date: &date, Source: "tcpdoctor " + ver, Manual: "tcpdoctor manual"}
	if err := doc.GenManTree(root, hdr, man); err != nil {
		return fmt.Errorf("%s man pages: %w", name, err)
	}
	comp := filepath.Join(out, "completions")
	if err := os.MkdirAll(comp, 0o755); err != nil {
		return err
	}
	for file, gen := range map[string]func(*cobra.Command, io.Writer) error{
		name + ".bash": func(c *cobra.Command, w io.Writer) error { return c.GenBashCompletionV2(w, true) },
		"_" + name:     func(c *cobra.Command, w io.Writer) error { return c.GenZshCompletion(w) },
		name + ".fish": func(c *cobra.Command, w io.Writer) error { return c.GenFishCompletion(w, true) },
	} {
		var b bytes.Buffer
		if err := gen(root, &b); err != nil {
			return fmt.Errorf("completion %s: %w", file, err)
		}
		if err := os.WriteFile(filepath.Join(comp, file), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

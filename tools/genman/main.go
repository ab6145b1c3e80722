// SPDX-License-Identifier: Apache-2.0

// Command genman writes tcpdoctor's man pages, generated from its cobra
// command tree, and its bash, zsh and fish completions (scripts/release.sh
// runs it; docs/release.md).
//
//	go run ./genman -version v1.2.3 -out DIR
//
// writes DIR/man/man1/tcpdoctor*.1 and DIR/completions/{tcpdoctor.bash,
// _tcpdoctor,tcpdoctor.fish}. The pages' date is SOURCE_DATE_EPOCH's,
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
	root := cli.NewRoot(&cli.Env{Stdout: io.Discard, Stderr: io.Discard, Build: version.Info{Version: *ver}})
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
	man := filepath.Join(*out, "man", "man1")
	if err := os.MkdirAll(man, 0o755); err != nil {
		return err
	}
	// No Title: cobra titles each page by its command (TCPDOCTOR-CHECK).
	hdr := &doc.GenManHeader{Section: "1", Date: &date, Source: "tcpdoctor " + *ver, Manual: "tcpdoctor manual"}
	if err := doc.GenManTree(root, hdr, man); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	comp := filepath.Join(*out, "completions")
	if err := os.MkdirAll(comp, 0o755); err != nil {
		return err
	}
	for name, gen := range map[string]func(*cobra.Command, io.Writer) error{
		"tcpdoctor.bash": func(c *cobra.Command, w io.Writer) error { return c.GenBashCompletionV2(w, true) },
		"_tcpdoctor":     func(c *cobra.Command, w io.Writer) error { return c.GenZshCompletion(w) },
		"tcpdoctor.fish": func(c *cobra.Command, w io.Writer) error { return c.GenFishCompletion(w, true) },
	} {
		var b bytes.Buffer
		if err := gen(root, &b); err != nil {
			return fmt.Errorf("completion %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(comp, name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

// Limits bound what reading servers' configuration may cost: a workload
// controls those files, so neither their size, their includes nor their
// globs may make the reader use more than this.
type Limits struct {
	// Bytes is the file bytes read in all.
	Bytes int64
	// Files is the files (and directories) opened in all.
	Files int
	// Entries is the directory entries globs visit in all.
	Entries int
	// Time is how long the reading may take.
	Time time.Duration
}

// ServerLimits bound the reading of one server's configuration.
func ServerLimits() Limits {
	return Limits{Bytes: 16 << 20, Files: maxFiles, Entries: 4096, Time: 2 * time.Second}
}

// CollectionLimits bound the reading of every server's configuration in
// one collection (every namespace).
func CollectionLimits() Limits {
	return Limits{Bytes: 64 << 20, Files: 4096, Entries: 16384, Time: 2 * time.Second}
}

// ErrBudget is what a read over its budget fails with.
var ErrBudget = errors.New("over the budget for reading application configuration")

// Budget counts what reading spent against its Limits, and against its
// parent's (a server's against its collection's). It is safe for
// concurrent use: a read abandoned at the deadline may still be running.
type Budget struct {
	mu       sync.Mutex
	what     string
	lim      Limits
	deadline time.Time
	parent   *Budget
	bytes    int64
	files    int
	entries  int
	stopped  bool
}

// NewBudget starts a collection's budget now.
func NewBudget(lim Limits, now time.Time) *Budget {
	return &Budget{what: "the collection's", lim: lim, deadline: now.Add(lim.Time)}
}

// child is a server's budget within b (b nil: a server on its own).
func (b *Budget) child(lim Limits, now time.Time) *Budget {
	c := &Budget{what: "the server's", lim: lim, deadline: now.Add(lim.Time), parent: b}
	if b != nil && b.deadline.Before(c.deadline) {
		c.deadline = b.deadline
	}
	return c
}

// Deadline is when the reading must have ended.
func (b *Budget) Deadline() time.Time { return b.deadline }

// stop makes every later charge fail (the reading was abandoned).
func (b *Budget) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
}

// charge spends bytes, files and directory entries, failing with
// ErrBudget when b or a parent is over a limit, past its deadline or
// stopped.
func (b *Budget) charge(bytes int64, files, entries int) error {
	for x := b; x != nil; x = x.parent {
		if err := x.chargeOne(bytes, files, entries); err != nil {
			return err
		}
	}
	return nil
}

func (b *Budget) chargeOne(bytes int64, files, entries int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.stopped:
		return fmt.Errorf("%w: abandoned at %s deadline of %v", ErrBudget, b.what, b.lim.Time)
	case time.Now().After(b.deadline):
		return fmt.Errorf("%w: past %s deadline of %v", ErrBudget, b.what, b.lim.Time)
	}
	b.bytes += bytes
	b.files += files
	b.entries += entries
	switch {
	case b.bytes > b.lim.Bytes:
		return fmt.Errorf("%w: more than %s %d bytes", ErrBudget, b.what, b.lim.Bytes)
	case b.files > b.lim.Files:
		return fmt.Errorf("%w: more than %s %d files", ErrBudget, b.what, b.lim.Files)
	case b.entries > b.lim.Entries:
		return fmt.Errorf("%w: more than %s %d directory entries in globs", ErrBudget, b.what, b.lim.Entries)
	}
	return nil
}

// left is the bytes b and its parents still allow.
func (b *Budget) left() int64 {
	n := int64(-1)
	for x := b; x != nil; x = x.parent {
		x.mu.Lock()
		l := x.lim.Bytes - x.bytes
		x.mu.Unlock()
		if n < 0 || l < n {
			n = l
		}
	}
	return max(n, 0)
}

// check fails when the deadline passed or the reading was abandoned;
// parsers call it every so many tokens or lines.
func (b *Budget) check() error { return b.charge(0, 0, 0) }

// budgetFS is a file system whose reads are charged to a budget.
type budgetFS struct {
	fs.FS
	b *Budget
}

// withBudget returns fsys with a budget: its own if it has one, else a
// server's budget of its own.
func withBudget(fsys fs.FS) budgetFS {
	if bf, ok := fsys.(budgetFS); ok {
		return bf
	}
	return budgetFS{FS: fsys, b: (*Budget)(nil).child(ServerLimits(), time.Now())}
}

// checkEvery is how many tokens or lines parsers read between deadline
// checks.
const checkEvery = 4096

// hasMeta says whether a glob pattern element has a special character.
func hasMeta(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// glob is fs.Glob bounded while it walks: every directory entry it reads
// is charged to fsys's budget, so links to "." under a pattern of many
// stars end at the budget, not after walking every path. Matches come
// in fs.Glob's order (each directory's names sorted).
func glob(fsys budgetFS, pattern string) ([]string, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, err
	}
	cands := []string{""}
	for _, elem := range strings.Split(pattern, "/") {
		var next []string
		for _, dir := range cands {
			if !hasMeta(elem) {
				next = append(next, dir+elem)
				continue
			}
			names, err := matchDir(fsys, strings.TrimSuffix(dir, "/"), elem)
			if err != nil {
				if errors.Is(err, ErrBudget) {
					return nil, err
				}
				continue // not a directory, gone, or not ours to read
			}
			for _, n := range names {
				next = append(next, dir+n)
			}
		}
		cands = next
		for i := range cands {
			cands[i] += "/"
		}
	}
	out := make([]string, 0, len(cands))
	for _, c := range cands {
		c = strings.TrimSuffix(c, "/")
		if !hasMeta(path.Base(pattern)) {
			// A literal last element: only names that exist, as fs.Glob.
			if err := fsys.b.charge(0, 0, 1); err != nil {
				return nil, err
			}
			if _, err := fs.Stat(fsys.FS, c); err != nil {
				continue
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// matchDir reads directory dir ("" for the root) a few entries at a time,
// charging each, and returns the names matching elem, sorted.
func matchDir(fsys budgetFS, dir, elem string) ([]string, error) {
	if dir == "" {
		dir = "."
	}
	if err := fsys.b.charge(0, 1, 0); err != nil {
		return nil, err
	}
	f, err := fsys.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, ok := f.(fs.ReadDirFile)
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: errors.New("not a directory")}
	}
	var names []string
	for {
		es, err := d.ReadDir(64)
		if err := fsys.b.charge(0, 0, len(es)); err != nil {
			return nil, err
		}
		for _, e := range es {
			if ok, _ := path.Match(elem, e.Name()); ok {
				names = append(names, e.Name())
			}
		}
		if err != nil || len(es) == 0 {
			break
		}
	}
	slices.Sort(names)
	return names, nil
}

// eachLine calls f with each line of b (without its newline) and its
// number, checking the budget every checkEvery lines; no copy of b is
// kept whole.
func eachLine(fsys budgetFS, b []byte, f func(n int, line string) error) error {
	n := 0
	for len(b) > 0 {
		n++
		if n%checkEvery == 0 {
			if err := fsys.b.check(); err != nil {
				return err
			}
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			i = len(b)
		}
		if err := f(n, string(b[:i])); err != nil {
			return err
		}
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return nil
}

// frag is at most a few dozen bytes of text read from a file, for an
// error message: a message never quotes much of a file.
func frag(s string) string {
	const n = 32
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Names a configuration gives (a haproxy frontend's, an Envoy listener's)
// become part of a cap's setting, and so of a label: each is cut to
// maxNameLen bytes, and one server gives at most maxNamed caps by name;
// those left out are counted in an error.
const (
	maxNameLen = 64
	maxNamed   = 64
	// maxPorts bounds the ports one frontend's bind lines give.
	maxPorts = 1024
)

// capName cuts a configuration's name to maxNameLen bytes.
func capName(s string) string {
	if len(s) <= maxNameLen {
		return s
	}
	return s[:maxNameLen] + "..."
}

// leftOut is the error that counts the named caps a server's
// configuration has beyond maxNamed.
func leftOut(what string, n int) error {
	return fmt.Errorf("%d %s with a connection limit: the first %d kept, %d left out", n, what, maxNamed, n-maxNamed)
}

// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// Limits on what one configuration may make the reader do.
const (
	// maxFileSize is the largest configuration file read.
	maxFileSize = 4 << 20
	// maxFiles bounds the files one configuration includes in all.
	maxFiles = 512
	// maxDepth bounds nested includes (and nested blocks).
	maxDepth = 32
)

// nginx's compiled-in defaults (ngx_event_core_module, ngx_core_module).
const (
	nginxDefaultConnections = 512
	nginxDefaultWorkers     = 1
)

// setting is one value read from a configuration and where: "FILE:LINE".
type setting struct {
	value  string
	source string
}

// nginxConf is what an nginx configuration says of its connections.
type nginxConf struct {
	// file is the main configuration file, as the process sees it.
	file string
	// workerConnections, workerProcesses, workerRlimitNofile: the last
	// value of each (nginx refuses duplicates; the last one is what a
	// -g override would leave), absent when not set.
	workerConnections, workerProcesses, workerRlimitNofile *setting
	// upstreamKeepalive is the largest upstream keepalive pool.
	upstreamKeepalive *setting
	// files lists every file read, the main one first.
	files []string
}

// token is one nginx configuration token: a word, or one of ; { }.
type token struct {
	text string
	line int
	// special is set for an unquoted ; { or }.
	special bool
}

// nginxLexer splits an nginx configuration into tokens as nginx's own
// reader does (ngx_conf_read_token): words separated by blanks, "#" to
// the end of the line a comment where a word would start, double or
// single quotes around a word with backslash escapes inside, ; { }
// ending a directive or a block. It hands out one token at a time, so
// a file's tokens are never all alive at once.
type nginxLexer struct {
	src  []byte
	i    int
	line int
}

func newNginxLexer(src []byte) *nginxLexer { return &nginxLexer{src: src, line: 1} }

// next returns the next token; ok is false at the end.
func (l *nginxLexer) next() (t token, ok bool, err error) {
	src := l.src
	for l.i < len(src) {
		i := l.i
		c := src[i]
		switch c {
		case '\n':
			l.line++
			l.i++
		case ' ', '\t', '\r':
			l.i++
		case '#':
			for l.i < len(src) && src[l.i] != '\n' {
				l.i++
			}
		case ';', '{', '}':
			l.i++
			return token{text: string(c), line: l.line, special: true}, true, nil
		case '"', '\'':
			start := l.line
			var b strings.Builder
			i++
			closed := false
			for i < len(src) {
				d := src[i]
				if d == '\\' && i+1 < len(src) {
					// nginx keeps the backslash except before the quote,
					// another backslash and t, r, n.
					switch src[i+1] {
					case c, '\\':
						b.WriteByte(src[i+1])
					case 't':
						b.WriteByte('\t')
					case 'r':
						b.WriteByte('\r')
					case 'n':
						b.WriteByte('\n')
					default:
						b.WriteByte('\\')
						b.WriteByte(src[i+1])
					}
					if src[i+1] == '\n' {
						l.line++
					}
					i += 2
					continue
				}
				if d == '\n' {
					l.line++
				}
				i++
				if d == c {
					closed = true
					break
				}
				b.WriteByte(d)
			}
			l.i = i
			if !closed {
				return token{}, false, fmt.Errorf("line %d: unbalanced %c", start, c)
			}
			return token{text: b.String(), line: start}, true, nil
		default:
			start := i
			var b strings.Builder
			for i < len(src) {
				d := src[i]
				if d == ' ' || d == '\t' || d == '\r' || d == '\n' || d == ';' || d == '{' || d == '}' {
					break
				}
				if d == '\\' && i+1 < len(src) {
					b.WriteByte(src[i+1])
					i += 2
					continue
				}
				// ${var} keeps its braces inside a word.
				if d == '$' && i+1 < len(src) && src[i+1] == '{' {
					end := bytes.IndexByte(src[i:], '}')
					if end < 0 {
						l.i = len(src)
						return token{}, false, fmt.Errorf("line %d: unbalanced ${", l.line)
					}
					b.Write(src[i : i+end+1])
					i += end + 1
					continue
				}
				b.WriteByte(d)
				i++
			}
			if i == start {
				i++ // cannot happen: a lone byte the cases above did not take
			}
			l.i = i
			return token{text: b.String(), line: l.line}, true, nil
		}
	}
	return token{}, false, nil
}

// nginxTokens is every token of src (for tests and fuzzing; the reader
// takes them one at a time).
func nginxTokens(src []byte) ([]token, error) {
	var out []token
	l := newNginxLexer(src)
	for {
		t, ok, err := l.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		out = append(out, t)
	}
}

// nginxReader walks a configuration and the files it includes.
type nginxReader struct {
	fsys   budgetFS
	prefix string // the directory relative includes are resolved in
	conf   *nginxConf
	read   int
}

// parseNginx reads the configuration file main (an absolute path as the
// process sees it) from fsys, following includes.
func parseNginx(fsys fs.FS, main string) (*nginxConf, error) {
	r := &nginxReader{fsys: withBudget(fsys), prefix: path.Dir(main), conf: &nginxConf{file: main}}
	if err := r.file(main, nil, 0); err != nil {
		return nil, err
	}
	return r.conf, nil
}

// readFile reads one file of the configuration, bounded in size and
// charged to fsys's budget (a file larger than what the budget has left
// is refused before it is read).
func readFile(fsys fs.FS, abs string) ([]byte, error) {
	bf := withBudget(fsys)
	name, err := rel(abs)
	if err != nil {
		return nil, err
	}
	if err := bf.b.charge(0, 1, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	f, err := bf.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	limit := min(int64(maxFileSize), bf.b.left())
	if st, err := f.Stat(); err == nil && st.Size() > limit {
		if st.Size() > maxFileSize {
			return nil, fmt.Errorf("%s: larger than %d bytes", abs, maxFileSize)
		}
		return nil, fmt.Errorf("%s: %w", abs, bf.b.charge(st.Size(), 0, 0))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", abs, err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", abs, maxFileSize)
	}
	if err := bf.b.charge(int64(len(b)), 0, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	return b, nil
}

// file reads one file in the block context ctx (outermost first).
func (r *nginxReader) file(abs string, ctx []string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%s: includes nested deeper than %d", abs, maxDepth)
	}
	if r.read++; r.read > maxFiles {
		return fmt.Errorf("more than %d files included", maxFiles)
	}
	b, err := readFile(r.fsys, abs)
	if err != nil {
		return err
	}
	r.conf.files = append(r.conf.files, abs)
	return r.block(abs, newNginxLexer(b), ctx, depth)
}

// block walks the directives of lx in context ctx.
func (r *nginxReader) block(file string, lx *nginxLexer, ctx []string, depth int) error {
	base := len(ctx)
	var words []token
	for n := 1; ; n++ {
		if n%checkEvery == 0 {
			if err := r.fsys.b.check(); err != nil {
				return fmt.Errorf("%s:%d: %w", file, lx.line, err)
			}
		}
		t, ok, err := lx.next()
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if !ok {
			break
		}
		if !t.special {
			words = append(words, t)
			continue
		}
		switch t.text {
		case "{":
			if len(words) == 0 {
				return fmt.Errorf("%s:%d: block without a name", file, t.line)
			}
			if len(ctx)-base >= maxDepth {
				return fmt.Errorf("%s:%d: blocks nested deeper than %d", file, t.line, maxDepth)
			}
			ctx = append(ctx, words[0].text)
		case "}":
			if len(words) > 0 {
				return fmt.Errorf("%s:%d: unexpected }", file, t.line)
			}
			if len(ctx) == base {
				return fmt.Errorf("%s:%d: unexpected }", file, t.line)
			}
			ctx = ctx[:len(ctx)-1]
		case ";":
			if len(words) == 0 {
				break // nginx takes a lone ; as an empty directive
			}
			if err := r.directive(file, words, ctx, depth); err != nil {
				return err
			}
		}
		words = nil
	}
	if len(words) > 0 {
		return fmt.Errorf("%s:%d: unexpected end of file, expecting \";\" or \"}\"", file, words[0].line)
	}
	if len(ctx) != base {
		return fmt.Errorf("%s: unexpected end of file, expecting \"}\"", file)
	}
	return nil
}

// directive records the settings that bound connections and follows
// includes.
func (r *nginxReader) directive(file string, words []token, ctx []string, depth int) error {
	name := words[0].text
	at := fmt.Sprintf("%s:%d", file, words[0].line)
	one := func() *setting {
		if len(words) != 2 {
			return nil
		}
		return &setting{value: words[1].text, source: at}
	}
	in := strings.Join(ctx, "/")
	switch {
	case name == "include" && len(words) == 2:
		return r.include(words[1].text, ctx, depth)
	case name == "worker_connections" && in == "events":
		if s := one(); s != nil {
			r.conf.workerConnections = s
		}
	case name == "worker_processes" && in == "":
		if s := one(); s != nil {
			r.conf.workerProcesses = s
		}
	case name == "worker_rlimit_nofile" && in == "":
		if s := one(); s != nil {
			r.conf.workerRlimitNofile = s
		}
	case name == "keepalive" && len(ctx) == 2 && ctx[1] == "upstream":
		if s := one(); s != nil {
			old := r.conf.upstreamKeepalive
			if n, err := strconv.Atoi(s.value); err == nil && (old == nil || n > atoiOr(old.value, 0)) {
				r.conf.upstreamKeepalive = s
			}
		}
	}
	return nil
}

// include reads the files pattern names (a glob, relative to the
// configuration's directory) in context ctx, in nginx's order (sorted).
func (r *nginxReader) include(pattern string, ctx []string, depth int) error {
	if !strings.HasPrefix(pattern, "/") {
		pattern = path.Join(r.prefix, pattern)
	}
	if !strings.ContainsAny(pattern, "*?[") {
		return r.file(pattern, ctx, depth+1)
	}
	name, err := rel(pattern)
	if err != nil {
		return err
	}
	matches, err := glob(r.fsys, name)
	if err != nil {
		return fmt.Errorf("include %s: %w", pattern, err)
	}
	for _, m := range matches {
		if err := r.file("/"+m, ctx, depth+1); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // gone since the glob
			}
			return err
		}
	}
	return nil
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// cleanAbs is path.Clean of an absolute path.
func cleanAbs(p string) string { return path.Clean("/" + p) }

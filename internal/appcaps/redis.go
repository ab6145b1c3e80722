// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// redisDefaultMaxclients is Redis's compiled-in maxclients.
const redisDefaultMaxclients = 10000

// redisReservedFDs is what Redis keeps of its open-file limit for itself
// (CONFIG_MIN_RESERVED_FDS): it lowers maxclients to the limit less this.
const redisReservedFDs = 32

// redisConf is what Redis's configuration says of maxclients.
type redisConf struct {
	maxclients *setting
	files      []string
}

// redisArgs splits a redis-server command line: the configuration file
// (first argument not starting with "--", "-" for stdin) and the options
// given as "--name value..." (each overriding the file).
func redisArgs(argv []string) (file string, opts [][]string) {
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if strings.HasPrefix(a, "--") && len(a) > 2 {
			o := []string{a[2:]}
			for i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "--") {
				i++
				o = append(o, argv[i])
			}
			opts = append(opts, o)
			continue
		}
		if i == 1 {
			file = a
		}
	}
	return file, opts
}

// redisWords splits one line of redis.conf as sdssplitargs does: blanks
// between words, double quotes with \-escapes, single quotes.
func redisWords(line string) ([]string, error) {
	var out []string
	i := 0
	for {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n') {
			i++
		}
		if i >= len(line) {
			return out, nil
		}
		var b strings.Builder
		switch q := line[i]; q {
		case '"', '\'':
			i++
			closed := false
			for i < len(line) {
				c := line[i]
				if q == '"' && c == '\\' && i+1 < len(line) {
					b.WriteByte(line[i+1])
					i += 2
					continue
				}
				if q == '\'' && c == '\\' && i+1 < len(line) && line[i+1] == '\'' {
					b.WriteByte('\'')
					i += 2
					continue
				}
				i++
				if c == q {
					closed = true
					break
				}
				b.WriteByte(c)
			}
			if !closed {
				return nil, fmt.Errorf("unbalanced quotes")
			}
			// A closing quote must be followed by a blank or the end.
			if i < len(line) && line[i] != ' ' && line[i] != '\t' {
				return nil, fmt.Errorf("closing quote must be followed by a space")
			}
		default:
			for i < len(line) && line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '\n' {
				b.WriteByte(line[i])
				i++
			}
		}
		out = append(out, b.String())
	}
}

// parseRedis reads a Redis configuration file and its includes.
func parseRedis(fs0 fs.FS, file string) (*redisConf, error) {
	fsys := withBudget(fs0)
	rc := &redisConf{}
	n := 0
	var read func(abs string, depth int) error
	read = func(abs string, depth int) error {
		if depth > maxDepth {
			return fmt.Errorf("%s: includes nested deeper than %d", abs, maxDepth)
		}
		if n++; n > maxFiles {
			return fmt.Errorf("more than %d files included", maxFiles)
		}
		b, err := readFile(fsys, abs)
		if err != nil {
			return err
		}
		rc.files = append(rc.files, abs)
		return eachLine(fsys, b, func(ln int, line string) error {
			t := strings.TrimSpace(line)
			if t == "" || t[0] == '#' {
				return nil
			}
			w, err := redisWords(t)
			if err != nil {
				return fmt.Errorf("%s:%d: %w", abs, ln, err)
			}
			if len(w) == 0 {
				return nil
			}
			switch strings.ToLower(w[0]) {
			case "include":
				if len(w) != 2 {
					return fmt.Errorf("%s:%d: include wants one file", abs, ln)
				}
				inc := w[1]
				if !strings.HasPrefix(inc, "/") {
					// Redis opens it from its working directory; the
					// file's own directory is the usual intent.
					inc = path.Join(path.Dir(abs), inc)
				}
				if err := read(inc, depth+1); err != nil {
					return err
				}
			case "maxclients":
				if len(w) == 2 {
					rc.maxclients = &setting{value: w[1], source: fmt.Sprintf("%s:%d", abs, ln)}
				}
			}
			return nil
		})
	}
	if err := read(file, 0); err != nil {
		return nil, err
	}
	return rc, nil
}

// redisMaxclients is the maxclients Redis runs with: the command line's
// --maxclients, else the file's, else the default; and the open-file
// limit it is lowered to (soft limit less 32) when known (soft > 0).
func redisMaxclients(fsys fs.FS, argv []string, soft int64) (value int64, source string, files []string, err error) {
	file, opts := redisArgs(argv)
	value, source = redisDefaultMaxclients, "default"
	if file != "" && file != "-" {
		if !strings.HasPrefix(file, "/") {
			return 0, "", nil, fmt.Errorf("configuration file %q is relative to a working directory that may have changed", file)
		}
		rc, err := parseRedis(fsys, file)
		if err != nil {
			return 0, "", nil, err
		}
		files = rc.files
		source = fmt.Sprintf("default (no maxclients in %s)", strings.Join(rc.files, ", "))
		if s := rc.maxclients; s != nil {
			n, err := strconv.ParseInt(s.value, 10, 64)
			if err != nil || n <= 0 {
				return 0, "", nil, fmt.Errorf("%s: maxclients %q is not a positive number", s.source, frag(s.value))
			}
			value, source = n, s.source
		}
	}
	for _, o := range opts {
		if strings.ToLower(o[0]) == "maxclients" && len(o) == 2 {
			n, err := strconv.ParseInt(o[1], 10, 64)
			if err != nil || n <= 0 {
				return 0, "", nil, fmt.Errorf("command line: --maxclients %q is not a positive number", o[1])
			}
			value, source = n, "command line --maxclients"
		}
	}
	if soft > redisReservedFDs && soft-redisReservedFDs < value {
		value = soft - redisReservedFDs
		source += fmt.Sprintf(", lowered to the open files limit %d less %d (/proc/PID/limits)", soft, redisReservedFDs)
	}
	return value, source, files, nil
}

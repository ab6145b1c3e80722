// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// PostgreSQL's defaults.
const (
	pgDefaultMaxConnections = 100
	pgDefaultSuperuserRes   = 3
)

// pgConf is the settings read from PostgreSQL's files, by lower-case
// name; the last one wins as in PostgreSQL.
type pgConf struct {
	settings map[string]setting
	files    []string
}

// pgLine splits one postgresql.conf line: "name = value", "name value",
// the value quoted with ” (doubled or \-escaped quotes inside) or bare,
// "#" to the end of the line a comment. ok is false for a blank line.
func pgLine(line string) (name, value string, ok bool, err error) {
	s := strings.TrimLeft(line, " \t\r")
	if s == "" || s[0] == '#' {
		return "", "", false, nil
	}
	i := 0
	for i < len(s) && (s[i] == '_' || s[i] == '.' || s[i] == '-' || s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || s[i] >= '0' && s[i] <= '9') {
		i++
	}
	if i == 0 {
		return "", "", false, fmt.Errorf("syntax error near %q", frag(s))
	}
	name = strings.ToLower(s[:i])
	s = strings.TrimLeft(s[i:], " \t")
	if strings.HasPrefix(s, "=") {
		s = strings.TrimLeft(s[1:], " \t")
	}
	if strings.HasPrefix(s, "'") {
		var b strings.Builder
		j := 1
		closed := false
		for j < len(s) {
			c := s[j]
			if c == '\\' && j+1 < len(s) {
				b.WriteByte(s[j+1])
				j += 2
				continue
			}
			if c == '\'' {
				if j+1 < len(s) && s[j+1] == '\'' {
					b.WriteByte('\'')
					j += 2
					continue
				}
				closed = true
				j++
				break
			}
			b.WriteByte(c)
			j++
		}
		if !closed {
			return "", "", false, fmt.Errorf("unterminated quoted string")
		}
		value, s = b.String(), s[j:]
	} else {
		j := 0
		for j < len(s) && s[j] != ' ' && s[j] != '\t' && s[j] != '#' && s[j] != '\r' {
			j++
		}
		value, s = s[:j], s[j:]
		if value == "" {
			return "", "", false, fmt.Errorf("%s: no value", name)
		}
	}
	s = strings.TrimLeft(s, " \t\r")
	if s != "" && s[0] != '#' {
		return "", "", false, fmt.Errorf("syntax error near %q", frag(s))
	}
	return name, value, true, nil
}

// parsePG reads a postgresql.conf and what it includes into pc.
func parsePG(fs0 fs.FS, file string, pc *pgConf, depth int) error {
	fsys := withBudget(fs0)
	if depth > maxDepth {
		return fmt.Errorf("%s: includes nested deeper than %d", file, maxDepth)
	}
	if len(pc.files) >= maxFiles {
		return fmt.Errorf("more than %d files included", maxFiles)
	}
	b, err := readFile(fsys, file)
	if err != nil {
		return err
	}
	pc.files = append(pc.files, file)
	abs := func(p string) string {
		if strings.HasPrefix(p, "/") {
			return p
		}
		return path.Join(path.Dir(file), p)
	}
	return eachLine(fsys, b, func(ln int, line string) error {
		name, value, ok, err := pgLine(line)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", file, ln, err)
		}
		if !ok {
			return nil
		}
		switch name {
		case "include":
			if err := parsePG(fsys, abs(value), pc, depth+1); err != nil {
				return err
			}
		case "include_if_exists":
			if err := parsePG(fsys, abs(value), pc, depth+1); err != nil && !isNotExist(err) {
				return err
			}
		case "include_dir":
			dir, err := rel(abs(value))
			if err != nil {
				return err
			}
			m, err := glob(fsys, dir+"/*.conf")
			if err != nil {
				return err
			}
			for _, f := range m {
				if strings.HasPrefix(path.Base(f), ".") {
					continue
				}
				if err := parsePG(fsys, "/"+f, pc, depth+1); err != nil {
					return err
				}
			}
		default:
			pc.settings[name] = setting{value: value, source: fmt.Sprintf("%s:%d", file, ln)}
		}
		return nil
	})
}

// pgArgs reads a postmaster's command line: the data directory (-D),
// and -c name=value, --name=value and -N settings.
func pgArgs(argv []string) (datadir string, set map[string]string) {
	set = map[string]string{}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		next := func() string {
			if i+1 < len(argv) {
				i++
				return argv[i]
			}
			return ""
		}
		switch {
		case a == "-D":
			datadir = next()
		case strings.HasPrefix(a, "-D"):
			datadir = a[2:]
		case a == "-c" || a == "-N":
			v := next()
			if a == "-N" {
				set["max_connections"] = v
			} else if k, val, ok := strings.Cut(v, "="); ok {
				set[strings.ToLower(strings.ReplaceAll(k, "-", "_"))] = val
			}
		case strings.HasPrefix(a, "--") && strings.Contains(a, "="):
			k, val, _ := strings.Cut(a[2:], "=")
			set[strings.ToLower(strings.ReplaceAll(k, "-", "_"))] = val
		}
	}
	return datadir, set
}

// pgCap is what a postmaster's configuration says: max_connections, the
// connections reserved for superusers (and, from 16, reserved_connections),
// each with its source.
type pgCap struct {
	max, reserved setting
	maxN, resN    int64
	files         []string
}

// postgres reads the connection limit of the postmaster started with argv
// from fsys (its root). PGDATA from the environment is not read: without
// -D the data directory is unknown.
func readPostgres(fsys fs.FS, argv []string) (*pgCap, error) {
	datadir, set := pgArgs(argv)
	conf := set["config_file"]
	if conf == "" {
		if datadir == "" {
			return nil, fmt.Errorf("no -D or config_file on the command line: the data directory is unknown")
		}
		conf = path.Join(datadir, "postgresql.conf")
	}
	if !strings.HasPrefix(conf, "/") {
		return nil, fmt.Errorf("configuration file %q is relative to a working directory that may have changed", conf)
	}
	fsys = withBudget(fsys)
	pc := &pgConf{settings: map[string]setting{}}
	if err := parsePG(fsys, conf, pc, 0); err != nil {
		return nil, err
	}
	if d, ok := pc.settings["data_directory"]; ok && set["data_directory"] == "" {
		datadir = d.value
	}
	if v := set["data_directory"]; v != "" {
		datadir = v
	}
	if datadir != "" && strings.HasPrefix(datadir, "/") {
		// ALTER SYSTEM's file, read after postgresql.conf.
		if err := parsePG(fsys, path.Join(datadir, "postgresql.auto.conf"), pc, 0); err != nil && !isNotExist(err) {
			return nil, err
		}
	}
	for k, v := range set {
		pc.settings[k] = setting{value: v, source: "command line"}
	}
	c := &pgCap{files: pc.files,
		max:      setting{value: strconv.Itoa(pgDefaultMaxConnections), source: "default (no max_connections in " + strings.Join(pc.files, ", ") + ")"},
		reserved: setting{value: strconv.Itoa(pgDefaultSuperuserRes), source: "default"}}
	if s, ok := pc.settings["max_connections"]; ok {
		c.max = s
	}
	if s, ok := pc.settings["superuser_reserved_connections"]; ok {
		c.reserved = s
	}
	var err error
	if c.maxN, err = strconv.ParseInt(c.max.value, 10, 64); err != nil || c.maxN <= 0 {
		return nil, fmt.Errorf("%s: max_connections %q is not a positive number", c.max.source, frag(c.max.value))
	}
	if c.resN, err = strconv.ParseInt(c.reserved.value, 10, 64); err != nil || c.resN < 0 {
		return nil, fmt.Errorf("%s: superuser_reserved_connections %q is not a number", c.reserved.source, frag(c.reserved.value))
	}
	if s, ok := pc.settings["reserved_connections"]; ok {
		n, err := strconv.ParseInt(s.value, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s: reserved_connections %q is not a number", s.source, frag(s.value))
		}
		c.resN += n
		c.reserved.source += ", reserved_connections " + s.value + " " + s.source
	}
	return c, nil
}

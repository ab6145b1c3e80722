// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// haproxyConf is what haproxy's configuration says of maxconn: the
// process-wide global one and each frontend's (its own or the defaults
// section's before it) with the ports it binds.
type haproxyConf struct {
	global    *setting
	frontends []haFrontend
	files     []string
}

// haFrontend is one frontend or listen section.
type haFrontend struct {
	name    string
	maxconn *setting
	ports   []uint16
}

// haproxyWords splits one configuration line as haproxy does: blanks
// between words, "#" at a word's start a comment to the end, double and
// single quotes, backslash escapes.
func haproxyWords(line string) ([]string, error) {
	var out []string
	var b strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
				continue
			}
			if c == '\\' && quote == '"' && i+1 < len(line) {
				i++
				c = line[i]
			}
			b.WriteByte(c)
		case c == '\\' && i+1 < len(line):
			i++
			b.WriteByte(line[i])
			inWord = true
		case c == '"' || c == '\'':
			quote = c
			inWord = true
		case c == ' ' || c == '\t' || c == '\r':
			if inWord {
				out = append(out, b.String())
				b.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return out, nil
		default:
			b.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		out = append(out, b.String())
	}
	return out, nil
}

// bindPorts reads the ports of a bind line's addresses
// ("[ipv4@]host:port[-last]", ":port", "[::]:port", comma-separated);
// UNIX sockets and fd@ have none.
func bindPorts(addrs string) []uint16 {
	var ps []uint16
	for _, a := range strings.Split(addrs, ",") {
		if strings.HasPrefix(a, "/") || strings.Contains(a, "unix@") || strings.Contains(a, "abns@") || strings.HasPrefix(a, "fd@") || strings.HasPrefix(a, "sockpair@") {
			continue
		}
		i := strings.LastIndexByte(a, ':')
		if i < 0 {
			continue
		}
		first, last, _ := strings.Cut(a[i+1:], "-")
		lo, err := strconv.ParseUint(first, 10, 16)
		if err != nil {
			continue
		}
		hi := lo
		if last != "" {
			if h, err := strconv.ParseUint(last, 10, 16); err == nil && h >= lo && h-lo < 64 {
				hi = h
			}
		}
		for p := lo; p <= hi; p++ {
			ps = append(ps, uint16(p))
		}
	}
	return ps
}

// parseHAProxy reads the files and directories -f names (a directory's
// *.cfg files in name order, as haproxy does).
func parseHAProxy(fs0 fs.FS, paths []string) (*haproxyConf, error) {
	fsys := withBudget(fs0)
	hc := &haproxyConf{}
	var defaults *setting
	for _, p := range paths {
		files := []string{p}
		if name, err := rel(p); err == nil {
			if st, err := fs.Stat(fsys, name); err == nil && st.IsDir() {
				m, err := glob(fsys, name+"/*.cfg")
				if err != nil {
					return nil, err
				}
				files = files[:0]
				for _, f := range m {
					files = append(files, "/"+f)
				}
			}
		}
		for _, f := range files {
			if len(hc.files) >= maxFiles {
				return nil, fmt.Errorf("more than %d files", maxFiles)
			}
			b, err := readFile(fsys, f)
			if err != nil {
				return nil, err
			}
			hc.files = append(hc.files, f)
			section := ""
			var fe *haFrontend
			err = eachLine(fsys, b, func(ln int, line string) error {
				w, err := haproxyWords(line)
				if err != nil {
					return fmt.Errorf("%s:%d: %w", f, ln, err)
				}
				if len(w) == 0 {
					return nil
				}
				at := fmt.Sprintf("%s:%d", f, ln)
				switch w[0] {
				case "global", "defaults", "frontend", "listen", "backend", "peers", "resolvers", "userlist", "program", "http-errors", "ring", "cache", "mailers":
					section, fe = w[0], nil
					if section == "defaults" {
						defaults = nil // a new defaults section starts from nothing
					}
					if section == "frontend" || section == "listen" {
						name := ""
						if len(w) > 1 {
							name = capName(w[1])
						}
						hc.frontends = append(hc.frontends, haFrontend{name: name, maxconn: defaults})
						fe = &hc.frontends[len(hc.frontends)-1]
					}
					return nil
				case "maxconn":
					if len(w) < 2 {
						return fmt.Errorf("%s: maxconn without a value", at)
					}
					s := &setting{value: w[1], source: at}
					switch {
					case section == "global":
						hc.global = s
					case section == "defaults":
						defaults = s
					case fe != nil:
						fe.maxconn = s
					}
				case "bind":
					if fe != nil && len(w) > 1 && len(fe.ports) < maxPorts {
						fe.ports = append(fe.ports, bindPorts(w[1])...)
					}
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	for i := range hc.frontends {
		slices.Sort(hc.frontends[i].ports)
		hc.frontends[i].ports = slices.Compact(hc.frontends[i].ports)
	}
	return hc, nil
}

// haproxyFiles reads the -f options of haproxy's command line.
func haproxyFiles(argv []string) []string {
	var fs []string
	for i := 1; i < len(argv); i++ {
		if argv[i] == "-f" && i+1 < len(argv) {
			i++
			fs = append(fs, argv[i])
		}
	}
	return fs
}

// cleanPaths makes each path absolute-clean; a relative one is an error.
func cleanPaths(ps []string) ([]string, error) {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("configuration %q is relative to a working directory that may have changed", p)
		}
		out = append(out, path.Clean(p))
	}
	return out, nil
}

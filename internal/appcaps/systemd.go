// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// unitOf names the systemd service a process runs in, from the lines of
// /proc/PID/cgroup ("0::/system.slice/redis-server.service"); "" if none.
func unitOf(cgroup []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cgroup))
	unit := ""
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 || !(f[0] == "0" && f[1] == "" || f[1] == "name=systemd") {
			continue
		}
		for _, part := range strings.Split(f[2], "/") {
			if strings.HasSuffix(part, ".service") {
				unit = part // the innermost
			}
		}
	}
	return unit
}

// unitDirs are where systemd looks for unit files, in its order.
func unitDirs() []string {
	return []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"}
}

// execStart reads the ExecStart= of unit as the files in fsys (a
// process's root) define it, drop-ins included, and returns its words
// and the file that set it.
func execStart(fs0 fs.FS, unit string) ([]string, string, error) {
	fsys := withBudget(fs0)
	file := unit
	instance := ""
	if at := strings.IndexByte(unit, '@'); at >= 0 {
		instance = strings.TrimSuffix(unit[at+1:], ".service")
		file = unit[:at+1] + ".service"
	}
	var line, from string
	scan := func(abs string) error {
		b, err := readFile(fsys, abs)
		if err != nil {
			return err
		}
		return eachLine(fsys, b, func(_ int, l string) error {
			l = strings.TrimSpace(l)
			if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
				line, from = v, abs // empty resets
			}
			return nil
		})
	}
	found := false
	for _, d := range unitDirs() {
		if scan(path.Join(d, file)) == nil {
			found = true
			break
		}
	}
	if !found {
		return nil, "", fmt.Errorf("unit %s: no unit file in %s", unit, strings.Join(unitDirs(), ", "))
	}
	for _, d := range unitDirs() {
		for _, name := range []string{unit, file} {
			dir, err := rel(path.Join(d, name+".d"))
			if err != nil {
				continue
			}
			m, err := glob(fsys, dir+"/*.conf")
			if errors.Is(err, ErrBudget) {
				return nil, "", err
			}
			for _, f := range m {
				_ = scan("/" + f)
			}
		}
	}
	line = strings.TrimLeft(line, "-@:+!")
	if line == "" {
		return nil, "", fmt.Errorf("unit %s: no ExecStart", unit)
	}
	line = strings.ReplaceAll(line, "%i", instance)
	line = strings.ReplaceAll(line, "%I", instance)
	w, err := redisWords(line)
	if err != nil {
		return nil, "", fmt.Errorf("%s: ExecStart: %w", from, err)
	}
	return w, from, nil
}

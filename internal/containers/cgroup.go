// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CgroupRef is what a process's cgroup path tells of its container or
// unit, before any runtime state is read.
type CgroupRef struct {
	// Runtime is the runtime the path's shape names; "" when the shape is
	// shared (the kubelet's cgroupfs layout serves containerd and Docker
	// behind cri-dockerd alike).
	Runtime string
	ID      string
	// Namespace is the containerd namespace of the plain "/<ns>/<id>"
	// shape.
	Namespace string
	PodUID    string
	// Unit is the systemd unit of a process outside containers.
	Unit string
	// Plain marks the "/<ns>/<id>" shape ctr makes: any two-level cgroup
	// has it, so it names a container only when containerd's state for
	// it exists (else Unit, if another line names one, stands).
	Plain bool
}

// maxCgroupFile caps what is read of /proc/PID/cgroup (a v1 host with
// every controller and long paths writes about 2 KiB).
const maxCgroupFile = 64 << 10

// Cgroup reads <proc>/<pid>/cgroup and parses it with parseCgroup.
func Cgroup(proc string, pid int) (CgroupRef, error) {
	f, err := os.Open(filepath.Join(proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return CgroupRef{}, fmt.Errorf("containers: cgroup: %w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxCgroupFile))
	if err != nil {
		return CgroupRef{}, fmt.Errorf("containers: cgroup: %w", err)
	}
	return parseCgroup(b), nil
}

// parseCgroup reads the lines of /proc/PID/cgroup (v1 "N:ctrl:path", v2
// "0::path", or both on a hybrid host) and returns what the first path
// of a known shape tells, looking at the unified line first, then
// name=systemd, then the v1 controllers in order. A shape it does not
// know gives an empty CgroupRef.
func parseCgroup(b []byte) CgroupRef {
	var unified, named, rest []string
	for line := range bytes.Lines(b) {
		line = bytes.TrimRight(line, "\r\n")
		// hierarchy-ID:controller-list:path; the path may hold colons.
		_, after, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		ctrls, path, ok := bytes.Cut(after, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case len(ctrls) == 0:
			unified = append(unified, string(path))
		case string(ctrls) == "name=systemd":
			named = append(named, string(path))
		default:
			rest = append(rest, string(path))
		}
	}
	var plain, unit CgroupRef
	for _, paths := range [][]string{unified, named, rest} {
		for _, p := range paths {
			r := classify(p)
			switch {
			case r.ID != "" && !r.Plain:
				return r
			case r.Plain && plain.ID == "":
				plain = r
			case r.Unit != "" && unit.Unit == "":
				unit = r
			}
		}
	}
	if plain.ID != "" {
		// The unit stands if containerd has no such container.
		plain.Unit = unit.Unit
		return plain
	}
	return unit
}

// scopes are the leaf names runtimes give a container's cgroup, with the
// runtime each belongs to: "<prefix><id>.scope" under systemd's driver,
// "<prefix><id>" under cgroupfs for CRI-O and Podman.
var scopes = [...]struct{ prefix, runtime string }{
	{"cri-containerd-", Containerd},
	{"crio-", CRIO},
	{"docker-", Docker},
	{"libpod-", Podman},
}

// classify reads one cgroup path.
func classify(path string) CgroupRef {
	comps := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	// Read from inside a cgroup namespace (tcpdoctor in a pod on a
	// cgroup v2 node), other processes' paths start with "..": what lies
	// above our own cgroup, "kubepods" included, is cut off, so a pod
	// directory is taken for one there.
	up := 0
	for up < len(comps) && (comps[up] == ".." || comps[up] == ".") {
		up++
	}
	comps = comps[up:]
	var r CgroupRef
	kube := up > 0
	for j, c := range comps {
		if strings.HasPrefix(c, "kubepods") {
			kube = true
		}
		if uid, ok := podUID(c, kube); ok {
			r.PodUID = uid
			continue
		}
		if rt, id, ok := scoped(c); ok {
			r.Runtime, r.ID = rt, id
			continue
		}
		// Docker's cgroupfs driver: /docker/<id>.
		if c == "docker" && j+1 < len(comps) && isHexID(comps[j+1]) {
			r.Runtime, r.ID = Docker, comps[j+1]
			continue
		}
		// The kubelet's cgroupfs driver: /kubepods/<qos>/pod<uid>/<id>.
		if r.PodUID != "" && j > 0 && isPodDir(comps[j-1]) && validID(c) {
			r.Runtime, r.ID = "", c
		}
	}
	if r.ID != "" {
		return r
	}
	r.PodUID = ""
	if len(comps) == 2 && validID(comps[0]) && validID(comps[1]) &&
		!isUnitName(comps[0]) && !isUnitName(comps[1]) {
		return CgroupRef{Runtime: Containerd, Namespace: comps[0], ID: comps[1], Plain: true}
	}
	for j := len(comps) - 1; j >= 0; j-- {
		if c := comps[j]; strings.HasSuffix(c, ".service") || strings.HasSuffix(c, ".scope") {
			return CgroupRef{Runtime: Systemd, Unit: c}
		}
	}
	return CgroupRef{}
}

// scoped recognises a runtime's container leaf: "cri-containerd-<id>.scope",
// "crio-<id>.scope", "docker-<id>.scope", "libpod-<id>.scope", and
// "crio-<id>", "libpod-<id>" (cgroupfs). Monitors ("crio-conmon-<id>",
// "libpod-conmon-<id>") are not containers.
func scoped(c string) (runtime, id string, ok bool) {
	for _, s := range scopes {
		rest, found := strings.CutPrefix(c, s.prefix)
		if !found {
			continue
		}
		rest, isScope := strings.CutSuffix(rest, ".scope")
		if !isScope && (s.runtime == Containerd || s.runtime == Docker) {
			continue
		}
		if isHexID(rest) {
			return s.runtime, rest, true
		}
	}
	return "", "", false
}

// podUID recognises the kubelet's pod cgroup: "pod<uid>" under cgroupfs,
// "kubepods-<qos>-pod<uid_with_underscores>.slice" under systemd.
func podUID(c string, kube bool) (string, bool) {
	if s, ok := strings.CutSuffix(c, ".slice"); ok && strings.HasPrefix(s, "kubepods") {
		i := strings.LastIndex(s, "-pod")
		if i < 0 {
			return "", false
		}
		uid := strings.ReplaceAll(s[i+len("-pod"):], "_", "-")
		return uid, isUID(uid)
	}
	if uid, ok := strings.CutPrefix(c, "pod"); ok && kube && isUID(uid) {
		return uid, true
	}
	return "", false
}

func isPodDir(c string) bool {
	_, ok := podUID(c, true)
	return ok
}

// isUID reports a pod uid: hex digits and dashes (a UUID), 8 to 64 long.
func isUID(s string) bool {
	if len(s) < 8 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '-' && !isHex(c) {
			return false
		}
	}
	return true
}

// isHexID reports a runtime-made container id: 12 to 128 lowercase hex
// digits (Docker, CRI-O, Podman and CRI make 64).
func isHexID(s string) bool {
	if len(s) < 12 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// validID reports a name containerd accepts as a namespace or container
// id: letters, digits, '.', '_', '-', starting with a letter or digit,
// at most 76 characters (its identifiers package's limit).
func validID(s string) bool {
	if s == "" || len(s) > 76 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

func isUnitName(c string) bool {
	for _, suf := range []string{".service", ".scope", ".slice", ".mount", ".socket"} {
		if strings.HasSuffix(c, suf) {
			return true
		}
	}
	return false
}

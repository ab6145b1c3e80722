// SPDX-License-Identifier: Apache-2.0

package window

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// ReadSeries reads a snapshot file (`tcpdoctor record`) as each
// namespace's series, in the order the file names them. A file whose last
// line was cut short (a recorder stopped mid-write) gives the complete
// samples before it with the *jsonl.TornError; any other fault, the
// error alone.
func ReadSeries(r io.Reader) ([]Series, error) {
	snaps, err := snapshot.ReadAll(r)
	var ss []Series
	byNS := make(map[string]int)
	for _, s := range snaps {
		i, ok := byNS[s.Netns.Name]
		if !ok {
			i = len(ss)
			byNS[s.Netns.Name] = i
			ss = append(ss, Series{Netns: s.Netns.Name})
		}
		ss[i].Snaps = append(ss[i].Snaps, s)
	}
	return ss, err
}

// Samples is how many samples ss hold.
func Samples(ss []Series) int {
	n := 0
	for _, sr := range ss {
		n += len(sr.Snaps)
	}
	return n
}

// NothingCollected is true when every sample came back empty-handed: no
// socket, counter or sysctl (a collection that failed).
func NothingCollected(ss []Series) bool {
	for _, sr := range ss {
		for _, s := range sr.Snaps {
			if len(s.Sockets) > 0 || len(s.Counters) > 0 || len(s.Sysctls) > 0 {
				return false
			}
		}
	}
	return true
}

// FirstError is the first source failure of ss, false when none failed.
func FirstError(ss []Series) (snapshot.SourceError, bool) {
	for _, sr := range ss {
		for _, s := range sr.Snaps {
			if len(s.Errors) > 0 {
				return s.Errors[0], true
			}
		}
	}
	return snapshot.SourceError{}, false
}

// Failure is one source failure and every namespace it struck.
type Failure struct {
	snapshot.SourceError
	Netns []string
}

// Failures is each source failure of ss once, however many namespaces
// and samples it struck, in the order they first came.
func Failures(ss []Series) []Failure {
	var out []Failure
	at := map[snapshot.SourceError]int{}
	for _, sr := range ss {
		for _, s := range sr.Snaps {
			for _, er := range s.Errors {
				i, ok := at[er]
				if !ok {
					i = len(out)
					at[er] = i
					out = append(out, Failure{SourceError: er})
				}
				if !slices.Contains(out[i].Netns, s.Netns.Name) {
					out[i].Netns = append(out[i].Netns, s.Netns.Name)
				}
			}
		}
	}
	return out
}

// Note says f on one line, escaped (a snapshot file's errors and names
// come from outside): "netns a, b: source S incomplete: ERR".
func (f Failure) Note() string {
	return fmt.Sprintf("%s: source %s incomplete: %s", netnsList(f.Netns), textsafe.String(f.Source), textsafe.String(f.Err))
}

// netnsList names namespaces for a note: "netns a", "netns a, b", or
// "4 network namespaces (a, b, c, ...)".
func netnsList(names []string) string {
	esc := make([]string, 0, 3)
	for i, n := range names {
		if i == 3 {
			esc = append(esc, "...")
			break
		}
		esc = append(esc, textsafe.String(n))
	}
	if len(names) <= 3 {
		return "netns " + strings.Join(esc, ", ")
	}
	return fmt.Sprintf("%d network namespaces (%s)", len(names), strings.Join(esc, ", "))
}

// FirstErrorText is the first source failure of ss, for an error: its
// source named unless its error already starts with it ("netns: enter
// host: ..."); "no source answered" when there is none.
func FirstErrorText(ss []Series) string {
	e, ok := FirstError(ss)
	switch {
	case !ok:
		return "no source answered"
	case strings.HasPrefix(e.Err, e.Source+":"):
		return e.Err
	}
	return e.Source + ": " + e.Err
}

// NoDump is true when no namespace's last sample holds a socket dump that
// succeeded: a listing of them collected nothing.
func NoDump(ss []Series) bool {
	for _, sr := range ss {
		if len(sr.Snaps) == 0 {
			continue
		}
		for _, src := range sr.Snaps[len(sr.Snaps)-1].Sources {
			if src.Source == snapshot.SourceSockdiag && src.OK {
				return false
			}
		}
	}
	return true
}

// ReadKept is ReadSeries for a file a recorder may have left mid-write:
// a torn last line after at least one complete sample is not an error,
// and torn says where it was (nil when the file ended cleanly).
func ReadKept(r io.Reader) (ss []Series, torn *jsonl.TornError, err error) {
	ss, err = ReadSeries(r)
	var te *jsonl.TornError
	if errors.As(err, &te) && Samples(ss) > 0 {
		return ss, te, nil
	}
	return ss, nil, err
}

// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
)

// Processes names every process under Roots.Proc that runs in a
// container, pod or unit, by pid, through ForPid's cache: what the
// `--pod` and `--container` filters list and select. Processes gone
// while read are passed over; other failures are joined in the error,
// and the names found are kept.
func (r *Resolver) Processes() (map[int]Info, error) {
	ents, err := os.ReadDir(r.roots.Proc)
	if err != nil {
		return nil, fmt.Errorf("containers: %w", err)
	}
	out := make(map[int]Info)
	var errs []error
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		info, err := r.ForPid(pid)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && len(errs) < 3 {
			errs = append(errs, err)
		}
		if info != (Info{}) {
			out[pid] = info
		}
	}
	return out, errors.Join(errs...)
}

package bpfsource

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestNotSupportedError(t *testing.T) {
	err := notSupported("no kernel BTF")
	if !errors.Is(err, ErrNotSupported) || err.Error() != "bpfsource: not supported: no kernel BTF" {
		t.Errorf("err = %v", err)
	}
	if os.Geteuid() != 0 {
		_, err := Open(Options{})
		if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), needRoot) {
			t.Errorf("Open as non-root = %v, want not supported: %s", err, needRoot)
		}
	}
}

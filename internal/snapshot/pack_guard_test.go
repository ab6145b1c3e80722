package snapshot

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestInfoReadThroughTCP: outside this package and the sockdiag decoder
// that fills it, no code reads Socket.Info or Was.Info directly, since a
// socket a Store kept has its tcp_info packed and Info nil: a direct
// read would judge it as having none. Writing Info (hand-built sockets)
// is allowed.
func TestInfoReadThroughTCP(t *testing.T) {
	root := filepath.Join("..", "..")
	read := regexp.MustCompile(`\.Info\b`)
	allowed := regexp.MustCompile(`\b(diag|opts|Options)\.Info\b|\.Info\s*=[^=]|\bInfo:`)
	skip := map[string]bool{filepath.Join("internal", "snapshot"): true, filepath.Join("internal", "sockdiag"): true}
	n := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skip[rel] || rel != "." && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		for i, line := range strings.Split(string(b), "\n") {
			if read.MatchString(allowed.ReplaceAllString(line, "")) {
				t.Errorf("%s:%d reads .Info directly (use TCP): %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil || n < 50 {
		t.Fatalf("walked %d files: %v", n, err)
	}
}

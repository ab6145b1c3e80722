// Package testbrowser renders tcpdoctor's HTML pages in Debian's headless
// Chromium for tests: the DOM after the page's scripts ran, and a
// screenshot.
package testbrowser

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Chromium finds Debian's headless browser, or skips the test.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH: the page is checked in a real browser only where one is installed (apt-get install chromium)")
	return ""
}

// Render loads the file page in headless Chromium with a window of width
// x height and budgetMS of virtual time for its scripts, and returns the
// DOM it dumped and a screenshot. CI runs as root, so the browser runs
// without its sandbox (--no-sandbox; it refuses root otherwise) and with
// /tmp for shared memory (a container's /dev/shm is small). Skips
// without Chromium.
func Render(t testing.TB, page string, width, height, budgetMS int) (string, image.Image) {
	t.Helper()
	bin := Chromium(t)
	dir := t.TempDir()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
		"--user-data-dir=" + filepath.Join(dir, "profile"), "--virtual-time-budget=" + strconv.Itoa(budgetMS),
		"--window-size=" + strconv.Itoa(width) + "," + strconv.Itoa(height)}
	run := func(extra ...string) []byte {
		cmd := exec.Command(bin, append(args, extra...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
		}
		return out
	}
	dom := string(run("--dump-dom", "file://"+page))
	shot := filepath.Join(dir, "shot.png")
	run("--screenshot="+shot, "file://"+page)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return dom, img
}

// Save writes img to the file the environment variable env names, if it
// names one: a way to look at what a test saw.
func Save(t testing.TB, env string, img image.Image) {
	t.Helper()
	out := os.Getenv(env)
	if out == "" {
		return
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
}

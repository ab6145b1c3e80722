// SPDX-License-Identifier: Apache-2.0

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
	"regexp"
	"strconv"
	"testing"
)

// Chromium finds Debian's headless browser. Without one the test skips,
// except as root: there scripts/test.sh (and CI, .ci/run) installs it,
// so its absence fails the test rather than hide the page checks.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Geteuid() == 0 {
		t.Fatal("no chromium on PATH as root: scripts/test.sh installs it (apt-get install chromium); the pages are checked in a real browser")
	}
	t.Skip("no chromium on PATH: the page is checked in a real browser only where one is installed (apt-get install chromium; scripts/test.sh does as root)")
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
	dom := dump(t, page, width, height, budgetMS)
	shot := filepath.Join(t.TempDir(), "shot.png")
	run(t, width, height, budgetMS, "--screenshot="+shot, "file://"+page)
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

// dump is the page's DOM after its scripts ran.
func dump(t testing.TB, page string, width, height, budgetMS int) string {
	t.Helper()
	return string(run(t, width, height, budgetMS, "--dump-dom", "file://"+page))
}

// run runs headless Chromium once with a fresh profile.
func run(t testing.TB, width, height, budgetMS int, extra ...string) []byte {
	t.Helper()
	bin := Chromium(t)
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
		"--user-data-dir=" + filepath.Join(t.TempDir(), "profile"), "--virtual-time-budget=" + strconv.Itoa(budgetMS),
		"--window-size=" + strconv.Itoa(width) + "," + strconv.Itoa(height)}
	cmd := exec.Command(bin, append(args, extra...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return out
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

// Width loads the file page in headless Chromium with a window of width x
// height and returns the document's scroll width and the viewport's
// client width (the window less its scrollbar), measured by a probe
// appended to a copy of the page once it has loaded and its scripts ran.
// A page that fits has scroll <= client. Skips without Chromium.
func Width(t testing.TB, page string, width, height, budgetMS int) (scroll, client int) {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	probe := `<script>addEventListener("load", function () { setTimeout(function () {
  var d = document.documentElement;
  d.setAttribute("data-probe-width", d.scrollWidth + " " + d.clientWidth);
}, 0); });</script>`
	probed := filepath.Join(t.TempDir(), filepath.Base(page))
	if err := os.WriteFile(probed, append(b, probe...), 0o600); err != nil {
		t.Fatal(err)
	}
	dom := dump(t, probed, width, height, budgetMS)
	m := probeRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("%s: the width probe did not run (no data-probe-width in the DOM)", page)
	}
	scroll, _ = strconv.Atoi(m[1])
	client, _ = strconv.Atoi(m[2])
	return scroll, client
}

var probeRE = regexp.MustCompile(`data-probe-width="(\d+) (\d+)"`)

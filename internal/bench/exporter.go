// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// ExporterOptions configure Exporter.
type ExporterOptions struct {
	Conns    int           // established connections (two sockets each)
	Cycles   int           // collection cycles to measure
	Interval time.Duration // the exporter's --interval
	// Serve is the argv prefix that runs our exporter; Exporter appends
	// --netns NS --listen 127.0.0.1:0 --interval D.
	Serve    []string
	Self     Self
	Progress io.Writer
}

// ExporterResult is what Exporter measured.
type ExporterResult struct {
	Sockets float64 // tcpdoctor_collection_sockets, summed
	Conns   int
	Kernel  string
	// Collect and Diagnose are the exporter's own timings of each cycle,
	// in seconds.
	Collect, Diagnose []float64
	// Scrapes are the latencies of scrapes every 100 ms, sorted.
	Scrapes []time.Duration
	// Concurrent is the wall time of eight concurrent scrapes and Slowest
	// the slowest of them.
	Concurrent, Slowest time.Duration
	Body                int     // bytes of the last scrape
	RSSNow              float64 // process_resident_memory_bytes at the end
	PeakRSS             int64   // the exporter's peak RSS (rusage), bytes
}

// Exporter runs our exporter on o.Conns connections and measures the
// cost of its cycles, scrape latency and its peak RSS.
func Exporter(ctx context.Context, o ExporterOptions) (*ExporterResult, error) {
	if o.Conns < 1 || o.Conns > MaxConns || o.Cycles < 1 || o.Cycles > 100 || o.Interval < 100*time.Millisecond {
		return nil, fmt.Errorf("serve-bench: --conns 1..%d, --cycles 1..100, --interval >= 100ms", MaxConns)
	}
	sp, err := newSpace(ctx, o.Self, o.Conns, o.Progress)
	if err != nil {
		return nil, err
	}
	defer sp.close()
	child := exec.Command(o.Serve[0], append(o.Serve[1:], "--netns", sp.name, "--listen", "127.0.0.1:0", "--interval", o.Interval.String())...)
	errPipe, err := child.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := child.Start(); err != nil {
		return nil, fmt.Errorf("serve-bench: start exporter: %w", err)
	}
	waited := false
	defer func() {
		if !waited {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	addr, err := serveAddr(errPipe)
	if err != nil {
		return nil, err
	}
	go func() { _, _ = io.Copy(io.Discard, errPipe) }()
	url := "http://" + addr + "/metrics"
	res := &ExporterResult{Conns: o.Conns, Kernel: collect.KernelRelease()}

	// Scrape every 100 ms while the exporter completes o.Cycles
	// collections after its first window (collections_total >= 2).
	var last map[string]float64
	seen := 0.0
	deadline := time.Now().Add(time.Duration(o.Cycles+3)*o.Interval + 5*time.Minute)
	for len(res.Collect) < o.Cycles {
		if time.Now().After(deadline) {
			return nil, errors.New("serve-bench: exporter did not complete its cycles in time")
		}
		if err := window.Sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
		start := time.Now()
		m, n, err := scrape(http.DefaultClient, url)
		if err != nil {
			return nil, err
		}
		res.Scrapes = append(res.Scrapes, time.Since(start))
		res.Body, last = n, m
		if c := m["tcpdoctor_collections_total"]; c > seen && c >= 2 {
			seen = c
			res.Collect = append(res.Collect, m["tcpdoctor_collection_duration_seconds"])
			res.Diagnose = append(res.Diagnose, m["tcpdoctor_diagnosis_duration_seconds"])
		}
	}
	// Eight concurrent scrapes: they share the prepared view.
	var wg sync.WaitGroup
	conc := make([]time.Duration, 8)
	cstart := time.Now()
	for i := range conc {
		wg.Go(func() {
			s := time.Now()
			if _, _, err := scrape(http.DefaultClient, url); err == nil {
				conc[i] = time.Since(s)
			}
		})
	}
	wg.Wait()
	res.Concurrent = time.Since(cstart)
	res.Slowest = slices.Max(conc)
	for k, v := range last {
		if strings.HasPrefix(k, "tcpdoctor_collection_sockets{") {
			res.Sockets += v
		}
	}
	res.RSSNow = last["process_resident_memory_bytes"]
	slices.Sort(res.Scrapes)
	_ = child.Process.Kill()
	_ = child.Wait()
	waited = true
	if res.PeakRSS, err = maxRSS(child.ProcessState); err != nil {
		return nil, err
	}
	return res, nil
}

// serveAddr reads the exporter's stderr up to the line naming its address.
func serveAddr(r io.Reader) (string, error) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if _, rest, ok := strings.Cut(line, "serving http://"); ok {
			addr, _, _ := strings.Cut(rest, "/")
			return addr, nil
		}
		if err != nil {
			return "", fmt.Errorf("serve-bench: exporter did not start: %q", line)
		}
	}
}

// scrape fetches url and returns every unlabelled sample and every
// tcpdoctor_collection_sockets sample by its full name, and the body size.
func scrape(client *http.Client, url string) (map[string]float64, int, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, 0, fmt.Errorf("serve-bench: scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("serve-bench: scrape: %s", resp.Status)
	}
	out := map[string]float64{}
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		n += len(line) + 1
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, " ")
		if !ok || (strings.Contains(k, "{") && !strings.HasPrefix(k, "tcpdoctor_collection_sockets{")) {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[k] = f
		}
	}
	return out, n, sc.Err()
}

// Median is the median of xs, 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

type serveOpts struct {
	listen    string
	src       sourceOpts
	interval  time.Duration
	top       int
	noOwners  bool
	bandwidth string
}

// newServeCmd serves the findings and the counters behind them as
// Prometheus metrics (docs/exporter.md).
func newServeCmd(e *Env) *cobra.Command {
	o := &serveOpts{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve findings and TCP health as Prometheus metrics on /metrics",
		Long: `Collect every --interval in the background, run the same rules as check over each window
(the previous collection to this one) and serve the result on /metrics. A scrape reads the latest
result and never starts a collection. Binds to loopback unless --listen says otherwise
(--listen :9477 for the network). See docs/exporter.md for every metric.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), e, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.listen, "listen", "127.0.0.1:9477", "address to serve /metrics on")
	fs.StringVar(&o.src.netns, "netns", "", "collect in the named network namespace (ip netns)")
	fs.BoolVar(&o.src.allNetns, "all-netns", false, "collect in every network namespace on the host (found anew each interval)")
	fs.DurationVar(&o.interval, "interval", 15*time.Second, "time between collections; the rules' window")
	fs.IntVar(&o.top, "top", exporter.DefaultTop, "listeners and destinations exported per namespace (label cardinality)")
	fs.BoolVar(&o.noOwners, "no-owners", false, "do not map sockets to processes (no command labels, cheaper)")
	fs.StringVar(&o.bandwidth, "bandwidth", "", "path bandwidth for BDP arithmetic, e.g. 100mbit (default: estimated)")
	cmd.AddCommand(newServeBenchCmd(e))
	return cmd
}

func runServe(ctx context.Context, e *Env, o *serveOpts) error {
	if err := o.src.validate(); err != nil {
		return err
	}
	if o.interval < 100*time.Millisecond {
		return usageErr("serve: --interval must be at least 100ms")
	}
	if o.top < 1 || o.top > 10000 {
		return usageErr("serve: --top must be 1..10000")
	}
	var dopts diag.Options
	if o.bandwidth != "" {
		var err error
		if dopts.Bandwidth, err = bdp.ParseRate(o.bandwidth); err != nil {
			return usageErr("serve: --bandwidth: %v", err)
		}
	}
	if nss, err := serveNamespaces(e, o); len(nss) == 0 {
		return usageErr("serve: %v", err)
	}
	x := exporter.New(exporter.Options{Top: o.top, Rules: rules.All(), Diag: dopts})
	reg, err := exporter.NewRegistry(x)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return usageErr("serve: %v", err)
	}
	e.progress("serving http://%s/metrics, collecting every %s", ln.Addr(), o.interval)
	c := &collect.Collector{Opts: collect.Options{Owners: !o.noOwners, BufLock: !o.noOwners, ProcRoot: e.ProcRoot}, Now: e.Now}
	var lastNote string
	loop := &exporter.Loop{
		X:        x,
		Interval: o.interval,
		Now:      e.Now,
		Sleep:    e.Sleep,
		Sample: func() []*snapshot.Snapshot {
			nss, err := serveNamespaces(e, o)
			if note := fmt.Sprint(err); err != nil && note != lastNote {
				e.progress("note: %v (said once until it changes)", err)
			}
			lastNote = fmt.Sprint(err)
			if len(nss) == 0 && err != nil {
				// The namespace asked for is gone: say so in the metrics
				// (source_up 0) instead of letting its series vanish.
				name := o.src.netns
				if name == "" {
					name = "host"
				}
				return []*snapshot.Snapshot{collect.Unreachable(snapshot.Netns{Name: name}, e.Now(), err)}
			}
			return c.Collect(nss)
		},
	}
	srv := &http.Server{Handler: exporter.Handler(reg), ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = loop.Run(ctx)
	}()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	wg.Wait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// serveNamespaces resolves --netns / --all-netns anew for each
// collection: namespaces come and go.
func serveNamespaces(e *Env, o *serveOpts) ([]netns.NS, error) {
	return o.src.findNamespaces(e)
}

type serveBenchOpts struct {
	conns    int
	cycles   int
	interval time.Duration
}

// newServeBenchCmd measures the exporter at N sockets: the cost of one
// collection and diagnosis cycle, scrape latency, and the serving
// process's peak RSS (docs/performance.md).
func newServeBenchCmd(e *Env) *cobra.Command {
	o := &serveBenchOpts{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the exporter (cycle cost, scrape latency, peak RSS) at N connections in a private namespace (root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServeBench(cmd.Context(), e, o)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.conns, "conns", 5000, "established connections to create (two sockets each)")
	fs.IntVar(&o.cycles, "cycles", 5, "collection cycles to measure")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "the exporter's --interval")
	return cmd
}

func runServeBench(ctx context.Context, e *Env, o *serveBenchOpts) error {
	if os.Geteuid() != 0 {
		return usageErr("serve bench: needs root (creates a network namespace)")
	}
	if o.conns < 1 || o.conns > 200000 || o.cycles < 1 || o.cycles > 100 || o.interval < 100*time.Millisecond {
		return usageErr("serve bench: --conns 1..200000, --cycles 1..100, --interval >= 100ms")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "tdsbench-" + hex.EncodeToString(b[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("serve bench: ip netns add: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("serve bench: lo up: %v: %s", err, out)
	}
	e.progress("serve bench: opening %d connections in netns %s...", o.conns, name)
	stop, err := startHolders(e, name, o.conns)
	defer stop()
	if err != nil {
		return err
	}
	child := exec.Command(e.Args0, "serve", "--netns", name, "--listen", "127.0.0.1:0", "--interval", o.interval.String())
	errPipe, err := child.StderrPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return fmt.Errorf("serve bench: start exporter: %w", err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	addr, err := serveAddr(errPipe)
	if err != nil {
		return err
	}
	go func() { _, _ = io.Copy(io.Discard, errPipe) }()
	url := "http://" + addr + "/metrics"

	// Scrape every 100 ms while the exporter completes o.cycles
	// collections after its first window (collections_total >= 2).
	var lat []time.Duration
	var collectS, diagS []float64
	var last map[string]float64
	var body int
	seen := 0.0
	deadline := time.Now().Add(time.Duration(o.cycles+3)*o.interval + 5*time.Minute)
	for len(collectS) < o.cycles {
		if time.Now().After(deadline) {
			return errors.New("serve bench: exporter did not complete its cycles in time")
		}
		if err := e.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
		start := time.Now()
		m, n, err := serveScrape(url)
		if err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
		body, last = n, m
		if c := m["tcpdoctor_collections_total"]; c > seen && c >= 2 {
			seen = c
			collectS = append(collectS, m["tcpdoctor_collection_duration_seconds"])
			diagS = append(diagS, m["tcpdoctor_diagnosis_duration_seconds"])
		}
	}
	// Eight concurrent scrapes: they share the prepared view.
	var wg sync.WaitGroup
	conc := make([]time.Duration, 8)
	cstart := time.Now()
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			if _, _, err := serveScrape(url); err == nil {
				conc[i] = time.Since(s)
			}
		}()
	}
	wg.Wait()
	concWall := time.Since(cstart)
	hwm, err := servePeakRSS(e.ProcRoot, child.Process.Pid)
	if err != nil {
		return err
	}
	sockets := 0.0
	for k, v := range last {
		if strings.HasPrefix(k, "tcpdoctor_collection_sockets{") {
			sockets += v
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	ms := func(s float64) string { return fmt.Sprintf("%.1f ms", s*1000) }
	fmt.Fprintf(tw, "sockets seen\t%.0f\t(%d established connections + listeners, kernel %s)\n", sockets, o.conns, collect.KernelRelease())
	fmt.Fprintf(tw, "collection (sockets, counters, owners), median of %d\t%s\tmax %s\n", len(collectS), ms(serveMedian(collectS)), ms(serveMax(collectS)))
	fmt.Fprintf(tw, "diagnosis + metric preparation, median of %d\t%s\tmax %s\n", len(diagS), ms(serveMedian(diagS)), ms(serveMax(diagS)))
	fmt.Fprintf(tw, "scrape latency (%d scrapes, during collections too)\tmedian %s\tp90 %s\tmax %s\n", len(lat),
		lat[len(lat)/2].Round(10*time.Microsecond), lat[len(lat)*9/10].Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
	sort.Slice(conc, func(i, j int) bool { return conc[i] < conc[j] })
	fmt.Fprintf(tw, "8 concurrent scrapes\twall %s\tslowest %s\n", concWall.Round(10*time.Microsecond), conc[len(conc)-1].Round(10*time.Microsecond))
	fmt.Fprintf(tw, "scrape size\t%d bytes\n", body)
	fmt.Fprintf(tw, "exporter peak RSS (VmHWM)\t%.1f MB\tRSS now %.1f MB\n", float64(hwm)/1e6, last["process_resident_memory_bytes"]/1e6)
	return tw.Flush()
}

// readServeAddr reads the child's stderr up to the line naming its address.
func serveAddr(r io.Reader) (string, error) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if _, rest, ok := strings.Cut(line, "serving http://"); ok {
			addr, _, _ := strings.Cut(rest, "/")
			return addr, nil
		}
		if err != nil {
			return "", fmt.Errorf("serve bench: exporter did not start: %q", line)
		}
	}
}

// scrapeOnce fetches url and returns every unlabelled sample and every
// tcpdoctor_collection_sockets sample by its full name, and the body size.
func serveScrape(url string) (map[string]float64, int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, 0, fmt.Errorf("serve bench: scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("serve bench: scrape: %s", resp.Status)
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

// peakRSS reads VmHWM of pid in bytes.
func servePeakRSS(procRoot string, pid int) (int64, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("serve bench: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb * 1024, nil
				}
			}
		}
	}
	return 0, errors.New("serve bench: no VmHWM in /proc/PID/status")
}

func serveMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func serveMax(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

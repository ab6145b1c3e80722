// SPDX-License-Identifier: Apache-2.0

// Package trafficcmd is the hidden `tcpdoctor-lab traffic` command the lab
// runs inside its namespaces: one subcommand per side of each generator in
// internal/lab/traffic, flags in, one JSON result line out.
package trafficcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/traffic"
)

// ErrUsage is wrapped by errors about the command line.
var ErrUsage = errors.New("usage")

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
}

// env is what the subcommands write to: stdout for results, procRoot for
// naming the process.
type env struct {
	out      io.Writer
	procRoot string
}

// wlCommon are the flags every traffic side has.
type wlCommon struct {
	addr        string
	bufs        traffic.Buffers
	sndbuf      byteSize
	rcvbuf      byteSize
	duration    time.Duration
	maxDuration time.Duration
	comm        string
}

// New is the hidden entry the lab executes inside its namespaces:
// `tcpdoctor-lab traffic <name>-server|<name>-client|proxy`. Servers print
// {"ready":true,"addr":...} on out once listening; every side prints its
// result as one JSON line on out when done. procRoot is "/proc" but in
// tests.
func New(out io.Writer, procRoot string) *cobra.Command {
	e := &env{out: out, procRoot: procRoot}
	cmd := &cobra.Command{
		Use:    "traffic",
		Short:  "Lab traffic generators (internal)",
		Hidden: true,
	}
	cmd.AddCommand(
		wlRPCServer(e), wlRPCClient(e),
		wlBulkServer(e), wlBulkClient(e),
		wlStormServer(e), wlStormClient(e),
		wlChurnServer(e), wlChurnClient(e), wlProxy(e),
		wlBigServer(e), wlBigClient(e),
		wlSlowHTTPServer(e), wlHoldHTTPClient(e),
	)
	return cmd
}

// wlCmd builds one traffic subcommand; flags adds its own flags and run
// runs it with ready (nil for clients).
func wlCmd[R any](e *env, use, comm, short string, server bool, flags func(*pflag.FlagSet),
	run func(ctx context.Context, c *wlCommon, ready func(string)) (R, error)) *cobra.Command {
	c := &wlCommon{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.maxDuration <= 0 {
				return usageErr("traffic %s: --max-duration must be positive", use)
			}
			if !server && c.addr == "" {
				return usageErr("traffic %s: --addr is required", use)
			}
			c.bufs = traffic.Buffers{SndBuf: int(c.sndbuf), RcvBuf: int(c.rcvbuf)}
			if c.comm != "" {
				setComm(e.procRoot, c.comm)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), c.maxDuration)
			defer cancel()
			enc := json.NewEncoder(e.out)
			var ready func(string)
			if server {
				ready = func(addr string) {
					_ = enc.Encode(struct {
						Ready bool   `json:"ready"`
						Addr  string `json:"addr"`
					}{true, addr})
				}
			}
			res, err := run(ctx, c, ready)
			if err != nil {
				return err
			}
			return enc.Encode(res)
		},
	}
	fs := cmd.Flags()
	defAddr := ""
	if server {
		defAddr = "127.0.0.1:0"
	}
	fs.StringVar(&c.addr, "addr", defAddr, "address to listen on (server) or connect to (client)")
	fs.Var(&c.sndbuf, "sndbuf", "SO_SNDBUF in bytes (K/M suffixes), set before listen/connect; 0: autotuned")
	fs.Var(&c.rcvbuf, "rcvbuf", "SO_RCVBUF in bytes (K/M suffixes), set before listen/connect; 0: autotuned")
	fs.DurationVar(&c.duration, "duration", 0, "run time (0: until the count is done, or --max-duration)")
	fs.DurationVar(&c.maxDuration, "max-duration", 60*time.Second, "hard cap on the run time")
	fs.StringVar(&c.comm, "comm", comm, "process name to set (prctl PR_SET_NAME); empty: leave it")
	flags(fs)
	return cmd
}

// setComm names the process: the calling thread via prctl and the main
// thread (what /proc/PID/comm shows) via /proc/self/comm. Best effort.
func setComm(procRoot, name string) {
	if len(name) > 15 {
		name = name[:15]
	}
	if b, err := unix.BytePtrFromString(name); err == nil {
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(b)), 0, 0, 0)
	}
	if procRoot == "" {
		procRoot = "/proc"
	}
	_ = os.WriteFile(filepath.Join(procRoot, "self", "comm"), []byte(name), 0)
}

func wlRPCServer(e *env) *cobra.Command {
	var backlog int
	var thinkMin, thinkMax time.Duration
	return wlCmd(e, "rpc-server", "rpc-server", "RPC server: one reader per connection, think time, response", true,
		func(fs *pflag.FlagSet) {
			fs.IntVar(&backlog, "backlog", 0, "listen backlog (0: somaxconn)")
			fs.DurationVar(&thinkMin, "think-min", 0, "minimum think time")
			fs.DurationVar(&thinkMax, "think-max", 0, "maximum think time (uniform in [min, max])")
		},
		func(ctx context.Context, c *wlCommon, ready func(string)) (traffic.RPCServerResult, error) {
			return traffic.RunRPCServer(ctx, traffic.RPCServerConfig{
				Addr: c.addr, Backlog: backlog, Buffers: c.bufs, ThinkMin: thinkMin, ThinkMax: thinkMax,
				Duration: c.duration, Ready: ready,
			})
		})
}

func wlRPCClient(e *env) *cobra.Command {
	var conns, callers int
	var reqSize byteSize
	var factor float64
	var count int64
	var dialTimeout time.Duration
	return wlCmd(e, "rpc-client", "rpc-client", "RPC client: N callers multiplexed over M connections", false,
		func(fs *pflag.FlagSet) {
			fs.IntVar(&conns, "conns", 1, "connections (M)")
			fs.IntVar(&callers, "callers", 1, "concurrent callers (N)")
			reqSize = 16 << 10
			fs.Var(&reqSize, "req-size", "request size in bytes")
			fs.Float64Var(&factor, "resp-factor", 2, "response size = factor x request size")
			fs.Int64Var(&count, "count", 0, "total requests (0: until --duration)")
			fs.DurationVar(&dialTimeout, "dial-timeout", 5*time.Second, "connect timeout")
		},
		func(ctx context.Context, c *wlCommon, _ func(string)) (traffic.RPCClientResult, error) {
			d := c.duration
			if d == 0 && count == 0 {
				d = c.maxDuration
			}
			return traffic.RunRPCClient(ctx, traffic.RPCClientConfig{
				Addr: c.addr, Conns: conns, Callers: callers, ReqSize: int(reqSize), RespFactor: factor,
				Duration: d, Count: count, Buffers: c.bufs, DialTimeout: dialTimeout,
			})
		})
}

func wlBulkServer(e *env) *cobra.Command {
	var backlog, count int
	var readSize byteSize
	var readDelay time.Duration
	return wlCmd(e, "bulk-server", "bulk-server", "Bulk transfer server", true,
		func(fs *pflag.FlagSet) {
			fs.IntVar(&backlog, "backlog", 0, "listen backlog (0: somaxconn)")
			fs.IntVar(&count, "count", 0, "exit after this many transfers (0: no limit)")
			fs.Var(&readSize, "read-size", "bytes per read when receiving (0: 64K)")
			fs.DurationVar(&readDelay, "read-delay", 0, "sleep after each read (a slow reader)")
		},
		func(ctx context.Context, c *wlCommon, ready func(string)) (traffic.BulkServerResult, error) {
			return traffic.RunBulkServer(ctx, traffic.BulkServerConfig{
				Addr: c.addr, Backlog: backlog, Buffers: c.bufs, ReadSize: int(readSize), ReadDelay: readDelay,
				Count: count, Duration: c.duration, Ready: ready,
			})
		})
}

func wlBulkClient(e *env) *cobra.Command {
	var size, readSize byteSize
	var dir string
	var readDelay, startDelay time.Duration
	return wlCmd(e, "bulk-client", "bulk-client", "Bulk transfer client", false,
		func(fs *pflag.FlagSet) {
			fs.Var(&size, "size", "bytes to transfer")
			fs.StringVar(&dir, "direction", traffic.Up, "up: client sends; down: server sends")
			fs.Var(&readSize, "read-size", "bytes per read when receiving (0: 64K)")
			fs.DurationVar(&readDelay, "read-delay", 0, "sleep after each read (a slow reader)")
			fs.DurationVar(&startDelay, "start-delay", 0, "wait this long after connecting before the transfer (not timed), e.g. for a tracer to find the connection")
		},
		func(ctx context.Context, c *wlCommon, _ func(string)) (traffic.BulkClientResult, error) {
			if c.duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.duration)
				defer cancel()
			}
			return traffic.RunBulkClient(ctx, traffic.BulkClientConfig{
				Addr: c.addr, Size: int64(size), Direction: dir, Buffers: c.bufs,
				ReadSize: int(readSize), ReadDelay: readDelay, StartDelay: startDelay,
			})
		})
}

func wlStormServer(e *env) *cobra.Command {
	var backlog int
	var rate float64
	return wlCmd(e, "storm-server", "storm-server", "Listener with a chosen backlog that accepts slowly or never", true,
		func(fs *pflag.FlagSet) {
			fs.IntVar(&backlog, "backlog", 128, "listen backlog (capped by somaxconn)")
			fs.Float64Var(&rate, "accept-rate", -1, "accepts per second (0: never; negative: as fast as possible)")
		},
		func(ctx context.Context, c *wlCommon, ready func(string)) (traffic.StormServerResult, error) {
			return traffic.RunStormServer(ctx, traffic.StormServerConfig{
				Addr: c.addr, Backlog: backlog, AcceptRate: rate, Buffers: c.bufs, Duration: c.duration, Ready: ready,
			})
		})
}

func wlStormClient(e *env) *cobra.Command {
	var count int
	var rate float64
	var timeout time.Duration
	return wlCmd(e, "storm-client", "storm-client", "Connection storm: K connects at R/s, held open", false,
		func(fs *pflag.FlagSet) {
			fs.IntVar(&count, "count", 100, "connections to open (K)")
			fs.Float64Var(&rate, "rate", 0, "connects started per second (0: all at once)")
			fs.DurationVar(&timeout, "connect-timeout", 5*time.Second, "per-connect timeout")
		},
		func(ctx context.Context, c *wlCommon, _ func(string)) (traffic.StormClientResult, error) {
			return traffic.RunStormClient(ctx, traffic.StormClientConfig{
				Addr: c.addr, Count: count, Rate: rate, ConnectTimeout: timeout, Duration: c.duration, Buffers: c.bufs,
			})
		})
}

func wlChurnServer(e *env) *cobra.Command {
	var backlog int
	return wlCmd(e, "churn-server", "churn-server", "Request/response server for short connections", true,
		func(fs *pflag.FlagSet) {
			fs.IntVar(&backlog, "backlog", 0, "listen backlog (0: somaxconn)")
		},
		func(ctx context.Context, c *wlCommon, ready func(string)) (traffic.ChurnServerResult, error) {
			return traffic.RunChurnServer(ctx, traffic.ChurnServerConfig{
				Addr: c.addr, Backlog: backlog, Buffers: c.bufs, Duration: c.duration, Ready: ready,
			})
		})
}

func wlChurnClient(e *env) *cobra.Command {
	var o traffic.ChurnClientConfig
	var reqSize, respSize byteSize
	return wlCmd(e, "churn-client", "churn-client", "Short connections at a rate (or --pool, or --hold)", false,
		func(fs *pflag.FlagSet) {
			fs.Float64Var(&o.Rate, "rate", 0, "requests (hold: connects) per second (0: as fast as --concurrency allows)")
			fs.IntVar(&o.Count, "count", 0, "requests (0: until --duration)")
			fs.IntVar(&o.Concurrency, "concurrency", 64, "requests in flight at most")
			fs.IntVar(&o.Pool, "pool", 0, "reuse this many keep-alive connections (the fix)")
			fs.IntVar(&o.Hold, "hold", 0, "open this many connections and keep them until --duration ends")
			fs.Var(&reqSize, "req-size", "request bytes (0: 64)")
			fs.Var(&respSize, "resp-size", "response bytes (0: 64)")
			fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "per request, connect included")
			fs.BoolVar(&o.Linger0, "linger0", false, "close with RST (SO_LINGER 0): no TIME_WAIT, unsent data lost")
		},
		func(ctx context.Context, c *wlCommon, _ func(string)) (traffic.ChurnClientResult, error) {
			cfg := o
			cfg.Addr, cfg.Buffers, cfg.Duration = c.addr, c.bufs, c.duration
			cfg.ReqSize, cfg.RespSize = int(reqSize), int(respSize)
			if cfg.Duration == 0 && (cfg.Count == 0 || cfg.Hold > 0) {
				cfg.Duration = c.maxDuration
			}
			return traffic.RunChurnClient(ctx, cfg)
		})
}

func wlSlowHTTPServer(e *env) *cobra.Command {
	var delay time.Duration
	return wlCmd(e, "slow-http-server", "slow-http", "HTTP upstream answering each request after --delay", true,
		func(fs *pflag.FlagSet) {
			fs.DurationVar(&delay, "delay", 5*time.Second, "wait before each answer")
		},
		func(ctx context.Context, c *wlCommon, ready func(string)) (traffic.SlowHTTPServerResult, error) {
			return traffic.RunSlowHTTPServer(ctx, traffic.SlowHTTPServerConfig{Addr: c.addr, Delay: delay, Duration: c.duration, Ready: ready})
		})
}

func wlHoldHTTPClient(e *env) *cobra.Command {
	var o traffic.HoldHTTPClientConfig
	return wlCmd(e, "hold-http-client", "hold-http", "HTTP clients each holding one request at a time, retrying after failures", false,
		func(fs *pflag.FlagSet) {
			fs.IntVar(&o.Clients, "clients", 400, "concurrent clients")
			fs.DurationVar(&o.Retry, "retry", 200*time.Millisecond, "wait after a failed request")
			fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, "per request, connect included")
		},
		func(ctx context.Context, c *wlCommon, _ func(string)) (traffic.HoldHTTPClientResult, error) {
			cfg := o
			cfg.Addr, cfg.Duration = c.addr, c.duration
			if cfg.Duration == 0 {
				cfg.Duration = c.maxDuration
			}
			return traffic.RunHoldHTTPClient(ctx, cfg)
		})
}

func wlProxy(e *env) *cobra.Command {
	var backends, sources []string
	var backlog int
	var timeout time.Duration
	return wlCmd(e, "proxy", "proxy", "TCP proxy: a new upstream connection per client connection", true,
		func(fs *pflag.FlagSet) {
			fs.StringSliceVar(&backends, "backend", nil, "backend ip:port (repeat or comma-separate: round-robin)")
			fs.StringSliceVar(&sources, "source", nil, "local IPs to connect from (round-robin)")
			fs.IntVar(&backlog, "backlog", 0, "listen backlog (0: somaxconn)")
			fs.DurationVar(&timeout, "connect-timeout", 5*time.Second, "upstream connect timeout")
		},
		func(ctx context.Context, c *wlCommon, ready func(string)) (traffic.ProxyResult, error) {
			return traffic.RunProxy(ctx, traffic.ProxyConfig{
				Addr: c.addr, Backends: backends, Sources: sources, Backlog: backlog, Buffers: c.bufs,
				ConnectTimeout: timeout, Duration: c.duration, Ready: ready,
			})
		})
}

func wlBigServer(e *env) *cobra.Command {
	var backlog, count int
	size := byteSize(3_400_000)
	return wlCmd(e, "bigresponse-server", "bigresp-server", "HTTP/1.1-like server of large responses", true,
		func(fs *pflag.FlagSet) {
			fs.Var(&size, "size", "default response bytes")
			fs.IntVar(&backlog, "backlog", 0, "listen backlog (0: somaxconn)")
			fs.IntVar(&count, "count", 0, "exit after this many responses (0: no limit)")
		},
		func(ctx context.Context, c *wlCommon, ready func(string)) (traffic.BigServerResult, error) {
			return traffic.RunBigServer(ctx, traffic.BigServerConfig{
				Addr: c.addr, Size: int64(size), Backlog: backlog, Buffers: c.bufs, Count: count,
				Duration: c.duration, Ready: ready,
			})
		})
}

func wlBigClient(e *env) *cobra.Command {
	var size byteSize
	var requests int
	var rate bitRate
	var timeout time.Duration
	return wlCmd(e, "bigresponse-client", "bigresp-client", "Sequential large requests on one keep-alive connection", false,
		func(fs *pflag.FlagSet) {
			fs.Var(&size, "size", "bytes to ask for (0: the server's default)")
			fs.IntVar(&requests, "requests", 1, "sequential requests")
			fs.Var(&rate, "link-rate", "link rate in bits/s (k/M/G suffixes) for the ideal time")
			fs.DurationVar(&timeout, "timeout", 30*time.Second, "per request")
		},
		func(ctx context.Context, c *wlCommon, _ func(string)) (traffic.BigClientResult, error) {
			if c.duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.duration)
				defer cancel()
			}
			return traffic.RunBigClient(ctx, traffic.BigClientConfig{
				Addr: c.addr, Size: int64(size), Requests: requests, LinkRate: float64(rate),
				Buffers: c.bufs, Timeout: timeout,
			})
		})
}

// byteSize is a flag of bytes with optional binary K/M/G suffixes.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }
func (b *byteSize) Type() string   { return "bytes" }
func (b *byteSize) Set(s string) error {
	v, err := parseSuffixed(s, 1024)
	if err != nil || !(v >= 0 && v <= 1<<40) {
		return fmt.Errorf("bad byte size %q", s)
	}
	*b = byteSize(v)
	return nil
}

// bitRate is a flag of bits per second, parsed as every rate is
// (bdp.ParseRate: "100mbit", "1G"; a bare number is refused).
type bitRate float64

func (r *bitRate) String() string { return strconv.FormatFloat(float64(*r), 'g', -1, 64) }
func (r *bitRate) Type() string   { return "bits/s" }
func (r *bitRate) Set(s string) error {
	v, err := bdp.ParseRate(s)
	if err != nil {
		return err
	}
	*r = bitRate(v)
	return nil
}

// parseSuffixed parses a number with an optional k/K, m/M or g/G multiplier
// of unit, unit squared or unit cubed.
func parseSuffixed(s string, unit float64) (float64, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult = unit
		case 'm', 'M':
			mult = unit * unit
		case 'g', 'G':
			mult = unit * unit * unit
		}
		if mult != 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	return v * mult, nil
}

// SPDX-License-Identifier: Apache-2.0

// The bench's delay accuracy run: UDP ping-pongs through the link.

package linkemu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
	"golang.org/x/sys/unix"
)

// benchPing starts a link with p and sends UDP ping-pongs through it. The
// echo and the receiving side are blocking sockets on SCHED_FIFO threads
// (when allowed), like the delay line, so that the figure is the link's
// and not this process's scheduling on a busy machine.
func benchPing(ctx context.Context, t *topo.Topo, o BenchOptions, p Params) (PingResult, error) {
	res := PingResult{RTT: p.RTT}
	l, err := Start(t, p)
	if err != nil {
		return res, err
	}
	defer l.Close()
	srv, err := udpSocket(t, t.Server, func(fd int) error {
		return unix.Bind(fd, &unix.SockaddrInet4{Port: benchPort})
	})
	if err != nil {
		return res, err
	}
	defer unix.Close(srv)
	dst := &unix.SockaddrInet4{Port: benchPort, Addr: t.ServerAddrs[0].As4()}
	cli, err := udpSocket(t, t.Client, func(fd int) error { return unix.Connect(fd, dst) })
	if err != nil {
		return res, err
	}
	defer unix.Close(cli)
	var samples []time.Duration
	if len(p.Exec) > 0 {
		res.Sent, samples, err = pingChild(ctx, p.Exec, cli, srv, o.PingInterval, o.PingDuration, p.RTT)
	} else {
		res.Sent, samples, err = pingPong(ctx, cli, srv, o.PingInterval, o.PingDuration, p.RTT)
	}
	if err != nil {
		return res, err
	}
	res.Link = l.Stats()
	res.Received = len(samples)
	if len(samples) == 0 {
		return res, errors.New("linkemu: bench ping: no replies")
	}
	slices.Sort(samples)
	res.Min = samples[0]
	res.P50 = samples[len(samples)/2]
	res.P99 = samples[min(len(samples)-1, len(samples)*99/100)]
	res.Max = samples[len(samples)-1]
	return res, l.Close()
}

// pingPong echoes on srv and sends a timestamped packet on cli every
// interval for duration, returning how many it sent and each reply's RTT
// minus rtt. The echo and the reply reader are blocking reads on
// SCHED_FIFO threads when allowed.
//
// Both receiving sockets take kernel receive timestamps (SO_TIMESTAMPNS,
// stamped when the packet reaches the socket) so that the time the echo
// and the reader need to wake up is not counted: the echo puts its own
// turnaround (send time minus kernel receive time) in the reply, and the
// RTT is the reply's kernel receive time minus the send time minus that
// turnaround. What remains is the path: the delay line both ways (its own
// wake-ups included) and the kernel's forwarding. Without timestamps (the
// option refused) the user-space times are used.
func pingPong(ctx context.Context, cli, srv int, interval, duration, rtt time.Duration) (int, []time.Duration, error) {
	for _, fd := range []int{cli, srv} {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // echo
		defer wg.Done()
		rtThread()
		b := make([]byte, 64)
		oob := make([]byte, 128)
		for !stop.Load() {
			n, oobn, _, from, err := unix.Recvmsg(srv, b, oob, 0)
			if err != nil || from == nil || n < 16 {
				continue
			}
			rx, ok := rxStamp(oob[:oobn])
			tx := time.Now().UnixNano()
			if !ok {
				rx = tx
			}
			binary.LittleEndian.PutUint64(b[8:], uint64(tx-rx))
			unix.Sendto(srv, b[:n], 0, from)
		}
	}()
	var samples []time.Duration
	go func() { // replies
		defer wg.Done()
		rtThread()
		b := make([]byte, 64)
		oob := make([]byte, 128)
		for !stop.Load() {
			n, oobn, _, _, err := unix.Recvmsg(cli, b, oob, 0)
			if err != nil || n < 16 {
				continue
			}
			rx, ok := rxStamp(oob[:oobn])
			if !ok {
				rx = time.Now().UnixNano()
			}
			sent := int64(binary.LittleEndian.Uint64(b))
			turn := int64(binary.LittleEndian.Uint64(b[8:]))
			samples = append(samples, time.Duration(rx-sent-turn)-rtt)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	end := time.After(duration)
	b := make([]byte, 32)
	sent := 0
loop:
	for {
		select {
		case <-ctx.Done():
			return sent, nil, ctx.Err()
		case <-end:
			break loop
		case <-tick.C:
			// Wall clock: kernel receive timestamps are CLOCK_REALTIME.
			binary.LittleEndian.PutUint64(b, uint64(time.Now().UnixNano()))
			if _, err := unix.Write(cli, b); err == nil {
				sent++
			}
		}
	}
	time.Sleep(rtt + 200*time.Millisecond) // the last replies
	stop.Store(true)
	wg.Wait()
	return sent, samples, nil
}

// rxStamp finds the SCM_TIMESTAMPNS receive time (ns, wall clock) in a
// control message buffer.
func rxStamp(oob []byte) (int64, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
			return sec*1e9 + nsec, true
		}
	}
	return 0, false
}

// udpSocket makes a blocking UDP socket in namespace ns with a 50 ms
// receive timeout (so that its readers can notice a stop) and runs setup.
func udpSocket(t *topo.Topo, ns string, setup func(fd int) error) (int, error) {
	fd := -1
	err := t.Do(ns, func() (err error) {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return setup(fd)
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("linkemu: bench udp socket in %s: %w", ns, err)
	}
	return fd, nil
}

// rtThread locks the goroutine to its thread for good and asks for
// SCHED_FIFO priority 10 and no timer slack (best effort).
func rtThread() {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 1 /* SCHED_FIFO */, Priority: 10}
	_ = unix.SchedSetAttr(0, &attr, 0)
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
}

// SPDX-License-Identifier: Apache-2.0

// Command podapp is the one program of the real-node test's images
// (internal/kubenode): the pod sandbox's pause process, and the two
// application pods tcpdoctor must name.
//
//	podapp pause                 sleep until SIGTERM or SIGINT, reaping children
//	podapp listen PORT BACKLOG   listen and never accept
//	podapp client ADDR N RCVBUF  keep up to N connections to ADDR and one to a
//	                             sender of its own, SO_RCVBUF pinned at RCVBUF
//	                             bytes, never reading
//
// It is built static (CGO_ENABLED=0) and is the only file of its image.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "podapp: %v\n", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("want pause, listen or client")
	}
	switch {
	case args[0] == "pause" && len(args) == 1:
		return pause()
	case args[0] == "listen" && len(args) == 3:
		port, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("listen: port: %w", err)
		}
		backlog, err := strconv.Atoi(args[2])
		if err != nil {
			return fmt.Errorf("listen: backlog: %w", err)
		}
		return listen(port, backlog)
	case args[0] == "client" && len(args) == 4:
		n, err := strconv.Atoi(args[2])
		if err != nil || n < 1 || n > 64 {
			return fmt.Errorf("client: N: want 1 to 64, got %q", args[2])
		}
		rcvbuf, err := strconv.Atoi(args[3])
		if err != nil {
			return fmt.Errorf("client: rcvbuf: %w", err)
		}
		return client(args[1], n, rcvbuf)
	}
	return fmt.Errorf("bad arguments %q", args)
}

// pause waits for SIGTERM or SIGINT (PID 1 ignores signals it does not
// handle) and reaps any child the pod's PID namespace hands it.
func pause() error {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return nil
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
	return nil
}

// listen binds 0.0.0.0:port with backlog and never calls accept, so
// connections wait in its accept queue until it overflows.
func listen(port, backlog int) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("listen: socket: %w", err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("listen: SO_REUSEADDR: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port}); err != nil {
		return fmt.Errorf("listen: bind :%d: %w", port, err)
	}
	if err := syscall.Listen(fd, backlog); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	fmt.Printf("listening on :%d, backlog %d, never accepting\n", port, backlog)
	return waitSignal()
}

// client keeps up to n connections to addr, each with SO_RCVBUF set
// before connect (which pins the buffer: the kernel stops autotuning it),
// trying a new one every second while it holds fewer (against a full
// accept queue the SYNs go unanswered). Beside them it opens one pinned
// connection to a sender of its own on 127.0.0.1 that writes 4 MiB into
// it, and never reads any of them: a reader that does not keep up.
func client(addr string, n, rcvbuf int) error {
	pinned := func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
		}); err != nil {
			return err
		}
		return serr
	}
	feed, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("client: feed: %w", err)
	}
	go func() {
		c, err := feed.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write(make([]byte, 4<<20)) // blocks once the pinned buffer is full
	}()
	d := net.Dialer{Timeout: 2 * time.Second, Control: pinned}
	slow, err := d.Dial("tcp4", feed.Addr().String())
	if err != nil {
		return fmt.Errorf("client: feed: %w", err)
	}
	defer slow.Close()
	fmt.Printf("reading nothing from %s, SO_RCVBUF %d\n", feed.Addr(), rcvbuf)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var held []net.Conn
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if len(held) < n {
			d := net.Dialer{Timeout: time.Second, Control: pinned}
			if c, err := d.Dial("tcp4", addr); err == nil {
				held = append(held, c)
				fmt.Printf("holding %d connections to %s\n", len(held), addr)
			}
		}
		select {
		case <-sig:
			return nil
		case <-tick.C:
		}
	}
}

func waitSignal() error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return nil
}

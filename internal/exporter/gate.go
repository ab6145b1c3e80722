// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// MaxScrapesInFlight is how many /metrics responses are gathered at once.
const MaxScrapesInFlight = 8

// gate lets at most n requests in at once; the others wait in one queue
// per client (the authenticated user, else the address it comes from),
// and the queues take turns, so a client with many connections gets no
// more turns than the scraper with one (docs/exporter.md, "Scrapes are
// served first"). A request waits at most its scrape timeout
// (X-Prometheus-Scrape-Timeout-Seconds, at most ScrapeTimeout), then gets
// 503.
type gate struct {
	mu     sync.Mutex
	free   int
	queues map[string][]*waiter
	turns  []string // clients with waiters, in turn order
}

type waiter struct {
	ch      chan struct{}
	granted bool
}

func newGate(n int) *gate {
	return &gate{free: n, queues: map[string][]*waiter{}}
}

// acquire waits for a slot until ctx ends (false).
func (g *gate) acquire(ctx context.Context, client string) bool {
	g.mu.Lock()
	if g.free > 0 && len(g.turns) == 0 {
		g.free--
		g.mu.Unlock()
		return true
	}
	w := &waiter{ch: make(chan struct{})}
	if len(g.queues[client]) == 0 {
		g.turns = append(g.turns, client)
	}
	g.queues[client] = append(g.queues[client], w)
	g.mu.Unlock()
	select {
	case <-w.ch:
		return true
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted {
		g.releaseLocked() // granted as it gave up: pass the slot on
		return false
	}
	q := g.queues[client]
	for i, x := range q {
		if x == w {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	g.setQueueLocked(client, q)
	return false
}

func (g *gate) setQueueLocked(client string, q []*waiter) {
	if len(q) > 0 {
		g.queues[client] = q
		return
	}
	delete(g.queues, client)
	for i, c := range g.turns {
		if c == client {
			g.turns = append(g.turns[:i], g.turns[i+1:]...)
			break
		}
	}
}

func (g *gate) release() {
	g.mu.Lock()
	g.releaseLocked()
	g.mu.Unlock()
}

// releaseLocked hands the slot to the first waiter of the client whose
// turn it is (that client then goes to the end of the turns), or frees it.
func (g *gate) releaseLocked() {
	if len(g.turns) == 0 {
		g.free++
		return
	}
	client := g.turns[0]
	q := g.queues[client]
	w := q[0]
	g.turns = g.turns[1:]
	if len(q) > 1 {
		g.queues[client] = q[1:]
		g.turns = append(g.turns, client)
	} else {
		delete(g.queues, client)
	}
	w.granted = true
	close(w.ch)
}

// clientOf names the client a request's turn belongs to.
func clientOf(r *http.Request) string {
	if u, ok := authenticated(r); ok {
		return "user " + u
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr " + host
}

// scrapeWait is how long a request may wait for its turn: the scrape
// timeout Prometheus sends, at most ScrapeTimeout.
func scrapeWait(r *http.Request) time.Duration {
	d := ScrapeTimeout
	if s, err := strconv.ParseFloat(r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"), 64); err == nil && s > 0 {
		d = min(d, time.Duration(s*float64(time.Second)))
	}
	return d
}

// wrap serves h through the gate.
func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), scrapeWait(r))
		ok := g.acquire(ctx, clientOf(r))
		cancel()
		if !ok {
			http.Error(w, "too many scrapes at once: waited for a turn until the scrape's timeout", http.StatusServiceUnavailable)
			return
		}
		defer g.release()
		h.ServeHTTP(w, r)
	})
}

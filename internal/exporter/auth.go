// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/time/rate"
)

// Bounds of basic authentication (docs/exporter.md, "Scrapes are served
// first"): a password seen before is answered from memory; a new one
// costs a bcrypt comparison, at most bcryptRate a second (bcryptBurst at
// once), one at a time, and a request that would wait more than
// bcryptWait for its turn gets 429 without one.
const (
	bcryptRate  = 10
	bcryptBurst = 10
	bcryptWait  = time.Second
	// Remembered outcomes: passwords that matched, and apart from them
	// passwords that did not, so failed logins never push out a good one.
	maxGoodLogins = 32
	maxBadLogins  = 1024
)

// fakeHash is compared for unknown users, so timing does not tell which
// users exist (the toolkit's: bcrypt of "fakepassword").
const fakeHash = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"

// readToolkitConfig reads the web configuration as the toolkit does: its
// defaults, strict YAML, relative paths from the file's directory.
func readToolkitConfig(path string) (*web.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &web.Config{
		TLSConfig:  web.TLSConfig{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13},
		HTTPConfig: web.HTTPConfig{HTTP2: true},
	}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		return nil, err
	}
	c.TLSConfig.SetDirectory(filepath.Dir(path))
	return c, nil
}

type authKey struct{}

// authenticated reports whether the request came through basic auth
// with a configured user's password, and which user.
func authenticated(r *http.Request) (string, bool) {
	u, ok := r.Context().Value(authKey{}).(string)
	return u, ok
}

// authHandler is the toolkit's basic authentication (and its response
// headers and rate_limit) with the bounds above: the configuration is
// re-read for each request, as the toolkit does.
type authHandler struct {
	path    string
	next    http.Handler
	limiter *rate.Limiter // rate_limit of the configuration; nil: none
	// tat is when the next comparison's turn comes at the steady rate
	// (a GCRA): a burst of bcryptBurst is allowed before it, a wait of
	// up to bcryptWait after. Guarded by mu.
	tat     time.Time
	one     sync.Mutex // one bcrypt at a time
	mu      sync.Mutex
	good    map[[32]byte]time.Time
	bad     map[[32]byte]struct{}
	onError func(err error)
}

func newAuthHandler(path string, c *web.Config, next http.Handler, onError func(error)) *authHandler {
	a := &authHandler{path: path, next: next, onError: onError,
		good: map[[32]byte]time.Time{}, bad: map[[32]byte]struct{}{}}
	if c.RateLimiterConfig.Interval != 0 {
		a.limiter = rate.NewLimiter(rate.Every(c.RateLimiterConfig.Interval), c.RateLimiterConfig.Burst)
	}
	return a
}

func (a *authHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := readToolkitConfig(a.path)
	if err != nil {
		a.onError(err)
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		return
	}
	if a.limiter != nil && !a.limiter.Allow() {
		http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		return
	}
	for k, v := range c.HTTPConfig.Header {
		w.Header().Set(k, v)
	}
	if len(c.Users) == 0 {
		a.next.ServeHTTP(w, r)
		return
	}
	user, pass, ok := r.BasicAuth()
	if ok {
		hash, known := c.Users[user]
		h := string(hash)
		if !known {
			h = fakeHash
		}
		switch a.check(user, h, pass) {
		case loginOK:
			if known {
				a.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authKey{}, user)))
				return
			}
		case loginBusy:
			refused(r)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many new passwords tried: try again", http.StatusTooManyRequests)
			return
		}
	}
	refused(r)
	w.Header().Set("WWW-Authenticate", "Basic")
	http.Error(w, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
}

type login int

const (
	loginBad login = iota
	loginOK
	loginBusy
)

// turn takes a bcrypt comparison's turn at now: how long to wait for it,
// or false (no turn taken) when that would be more than bcryptWait.
// Comparisons by any time T after the first are at most bcryptBurst +
// bcryptRate*T.
func (a *authHandler) turn(now time.Time) (time.Duration, bool) {
	const every = time.Second / bcryptRate
	a.mu.Lock()
	defer a.mu.Unlock()
	tat := a.tat
	if tat.Before(now) {
		tat = now
	}
	start := tat.Add(-(bcryptBurst - 1) * every) // the burst goes before the rate
	if start.Sub(now) > bcryptWait {
		return 0, false
	}
	a.tat = tat.Add(every)
	if start.Before(now) {
		return 0, true
	}
	return start.Sub(now), true
}

// check compares pass with hash, from memory when this user, hash and
// password were seen, else by bcrypt within its rate.
func (a *authHandler) check(user, hash, pass string) login {
	hh := sha256.New()
	for _, s := range []string{user, hash, pass} {
		hh.Write([]byte(s))
		hh.Write([]byte{0})
	}
	var k [32]byte
	copy(k[:], hh.Sum(nil))
	a.mu.Lock()
	if _, ok := a.good[k]; ok {
		a.good[k] = time.Now()
		a.mu.Unlock()
		return loginOK
	}
	if _, ok := a.bad[k]; ok {
		a.mu.Unlock()
		return loginBad
	}
	a.mu.Unlock()
	d, ok := a.turn(time.Now())
	if !ok {
		return loginBusy
	}
	if d > 0 {
		time.Sleep(d) // at most bcryptWait; the turn is taken either way
	}
	var err error
	a.one.Lock()
	err = bcrypt.CompareHashAndPassword([]byte(hash), []byte(pass))
	a.one.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		if len(a.bad) >= maxBadLogins {
			for old := range a.bad { // any one: only failures go
				delete(a.bad, old)
				break
			}
		}
		a.bad[k] = struct{}{}
		return loginBad
	}
	if len(a.good) >= maxGoodLogins {
		var oldest [32]byte
		var at time.Time
		for g, t := range a.good {
			if at.IsZero() || t.Before(at) {
				oldest, at = g, t
			}
		}
		delete(a.good, oldest)
	}
	a.good[k] = time.Now()
	return loginOK
}

package redis

import (
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/backend"
)

// Circuit breakers, one per Redis node.
//
// A single Redis and a Sentinel-managed master are one node, with one
// breaker. A cluster has a breaker per master address, so that one dead or
// hung master fails only the checks whose slots it serves, fast, while the
// checks bound for the other masters go on as before. Decide groups its
// checks per node anyway (for coalescing and for go-redis's per-node
// pipelines); each group asks its node's breaker and reports to it.
//
// Breakers are created on first use of an address. A failover moves slots
// to another address, whose breaker starts closed, so the slots are
// decided again as soon as go-redis has the new slot map, without waiting
// for the old master's open period. The old address's breaker stays
// behind, unused (nothing routes to it), until pruned: see breakers.get.
//
// When go-redis cannot tell which master serves a key (no slot map: the
// cluster has been unreachable since start), the check goes to the
// breaker of address "", which stands for "the cluster, node unknown":
// while no slot map can be loaded every check fails there and that breaker
// opens, failing them fast, and a probe per open period tries again. When
// go-redis has a slot map but no master for the slot, it sends the command
// to a random node, and nodeOf names that node: the check is judged
// against the node it was actually sent to.

// breaker is the circuit breaker of one node. Closed, it lets everything
// through and counts consecutive failed round trips; at the threshold it
// opens and fails calls at once for the open period; then it lets one
// probe through (half-open): the probe's success closes it, its failure
// opens it again. A caller giving up (its own context cancelled) proves
// nothing either way.
type breaker struct {
	addr      string // "" for the one node when not a cluster, or unknown
	threshold int    // <= 0: never opens
	openFor   time.Duration
	now       func() time.Time
	log       *logrus.Entry
	err       error // what calls failed fast get; built once

	mu        sync.Mutex
	failures  int
	open      bool
	openUntil time.Time
	probing   bool // a half-open probe is in flight
}

// verdict is what one round trip says about a node.
type verdict int

const (
	healthy verdict = iota // the node answered
	failed                 // the node did not answer in time, or refused
	neutral                // the caller gave up first; says nothing
)

// openError is the error of a call failed fast by an open breaker. It
// wraps backend.ErrCircuitOpen, which wraps backend.ErrUnavailable.
type openError struct{ msg string }

func (e *openError) Error() string { return e.msg }
func (e *openError) Unwrap() error { return backend.ErrCircuitOpen }

// allow reports whether a call may go to the node now; probe is true for
// the one call let through to test a breaker that was open.
func (b *breaker) allow() (ok, probe bool) {
	if b.threshold <= 0 {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true, false
	}
	if b.probing || b.now().Before(b.openUntil) {
		return false, false
	}
	b.probing = true
	return true, true
}

// done records the verdict of a call allow let through.
func (b *breaker) done(v verdict, probe bool) {
	if b.threshold <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	switch v {
	case healthy:
		if b.open {
			b.log.Info("redis: circuit breaker closed, the node answers again")
		}
		b.failures, b.open = 0, false
	case failed:
		b.failures++
		if (b.open && probe) || (!b.open && b.failures >= b.threshold) {
			if !b.open {
				b.log.WithFields(logrus.Fields{"failures": b.failures, "open_for": b.openFor}).
					Warn("redis: circuit breaker open, failing the node's calls fast")
			}
			b.open = true
			b.openUntil = b.now().Add(b.openFor)
		}
	case neutral:
		// A probe whose caller left lets the next call probe at once.
	}
}

// isOpen reports whether the breaker is failing calls fast.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// idle reports whether the breaker is in its initial state (closed, no
// failure counted, no probe in flight): dropping it and creating a new one
// later changes nothing.
func (b *breaker) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.open && b.failures == 0 && !b.probing
}

// minPruneAt is the number of cluster breakers below which none is
// pruned.
const minPruneAt = 64

// breakers are the breakers of one Backend, by node address.
type breakers struct {
	threshold int
	openFor   time.Duration
	now       func() time.Time
	log       *logrus.Entry

	single *breaker // the one node when not a cluster, or every node when disabled

	mu      sync.RWMutex
	m       map[string]*breaker // cluster nodes by address; "" for unknown
	pruneAt int
}

// newBreakers returns the breakers for o (normalized); cluster says
// whether there is one per node.
func newBreakers(o Options, log *logrus.Entry, cluster bool) *breakers {
	s := &breakers{
		threshold: o.Breaker.Failures,
		openFor:   o.Breaker.OpenFor,
		now:       o.Clock,
		log:       log,
		pruneAt:   minPruneAt,
	}
	if cluster && s.threshold > 0 {
		s.m = map[string]*breaker{}
	} else {
		s.single = s.newBreaker("", cluster)
	}
	return s
}

// newBreaker builds the breaker of addr.
func (s *breakers) newBreaker(addr string, cluster bool) *breaker {
	node := "redis"
	switch {
	case addr != "":
		node = "redis node " + addr
	case cluster:
		node = "redis cluster (no slot map)"
	}
	log := s.log
	if addr != "" {
		log = log.WithField("node", addr)
	}
	return &breaker{
		addr:      addr,
		threshold: s.threshold,
		openFor:   s.openFor,
		now:       s.now,
		log:       log,
		err: &openError{fmt.Sprintf("%s: %s: circuit open after %d consecutive failed round trips",
			backend.ErrUnavailable, node, s.threshold)},
	}
}

// get returns the breaker of the node at addr, creating it on first use.
//
// Breakers of addresses that are no longer masters stay until the map
// reaches twice the size it had after the last pruning (at least
// minPruneAt): then every idle breaker is dropped, which changes nothing
// (a new one is created, alike, if its address is used again). What stays
// is the breakers of nodes that failed lately, so the map is bounded by the
// cluster's size, plus the failed addresses of the last open period or so.
// A caller holding a breaker that was pruned meanwhile reports to it
// harmlessly: at worst one failure goes uncounted.
func (s *breakers) get(addr string) *breaker {
	if s.single != nil {
		return s.single
	}
	s.mu.RLock()
	b := s.m[addr]
	s.mu.RUnlock()
	if b != nil {
		return b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b = s.m[addr]; b != nil {
		return b
	}
	if len(s.m) >= s.pruneAt {
		for a, old := range s.m {
			if old.idle() {
				delete(s.m, a)
			}
		}
		s.pruneAt = max(minPruneAt, 2*len(s.m))
	}
	b = s.newBreaker(addr, true)
	s.m[addr] = b
	return b
}

// isOpen reports whether the breaker of addr is open (false if it has
// none), without creating one.
func (s *breakers) isOpen(addr string) bool {
	if s.single != nil {
		return s.single.isOpen()
	}
	s.mu.RLock()
	b := s.m[addr]
	s.mu.RUnlock()
	return b != nil && b.isOpen()
}

// len returns how many cluster breakers exist (0 when not a cluster).
func (s *breakers) len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.m)
}

package memory

import (
	"context"
	"math"
	"sync"

	"github.com/sluice-rl/sluice/pkg/backend"
)

// QuotaStore is the embedded backend's store of Rate Limit Quota Service
// state: the shares of the clients of one sluice instance. It computes what
// the Redis store's script computes (pkg/backend/backendtest holds both to
// one contract). The zero QuotaStore is ready to use; it is safe for
// concurrent use.
type QuotaStore struct {
	mu    sync.Mutex
	keys  map[string]*quotaKey
	calls int // Share calls since the last sweep
}

var _ backend.QuotaStore = (*QuotaStore)(nil)

// quotaKey is one rule's state for one bucket.
type quotaKey struct {
	members map[string]*quotaMember
	window  int64
	used    uint64
	keep    int64 // dropped by sweep after this instant
}

// quotaMember is one client's entry.
type quotaMember struct {
	demand float64
	share  uint64
	seen   int64
	window int64  // the window mine counts in
	mine   uint64 // the member's usage in window
}

// NewQuotaStore returns an empty QuotaStore.
func NewQuotaStore() *QuotaStore { return &QuotaStore{} }

// Share implements backend.QuotaStore.
func (s *QuotaStore) Share(_ context.Context, req backend.QuotaRequest) ([]backend.QuotaShare, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = make(map[string]*quotaKey)
	}
	out := make([]backend.QuotaShare, len(req.Rules))
	for i, r := range req.Rules {
		k := s.keys[r.Key]
		if k == nil {
			k = &quotaKey{members: make(map[string]*quotaMember)}
			s.keys[r.Key] = k
		}
		out[i] = k.share(req, r)
		k.keep = max(k.keep, r.Keep, req.Now+req.Stale)
	}
	if s.calls++; s.calls >= 1024 && s.calls >= len(s.keys) {
		s.sweep(req.Now)
	}
	return out, nil
}

// share applies one rule of req to k.
func (k *quotaKey) share(req backend.QuotaRequest, r backend.QuotaRule) backend.QuotaShare {
	if r.Window > 0 {
		if k.window != r.Window {
			k.window, k.used = r.Window, 0
		}
		k.used += r.Used
	}
	me := k.members[req.Member]
	if me == nil {
		me = &quotaMember{}
		k.members[req.Member] = me
	}
	me.demand, me.seen = r.Demand, req.Now
	if r.Window > 0 {
		if me.window != r.Window {
			me.window, me.mine = r.Window, 0
		}
		me.mine += r.Used
	}
	demands := make([]float64, 0, len(k.members))
	self := 0
	var others uint64
	var sum float64
	for name, m := range k.members {
		if name != req.Member && m.seen < req.Now-req.Stale {
			delete(k.members, name)
			continue
		}
		if name == req.Member {
			self = len(demands)
		} else {
			others += m.share
		}
		demands = append(demands, m.demand)
		sum += max(m.demand, 0)
	}
	target := uint64(math.Floor(backend.FairTarget(demands, self, r.Limit)))
	var free uint64
	if others < r.Limit {
		free = r.Limit - others
	}
	me.share = min(target, free)
	out := backend.QuotaShare{Share: me.share, Members: len(demands), Demand: sum}
	if r.Window > 0 {
		out.Used, out.Mine = k.used, me.mine
	}
	return out
}

// sweep drops the keys kept until before now, so that idle buckets cost
// nothing, as the Redis store's keys expire. Share runs it once per as many
// calls as there are keys (at least 1024), so its cost per call is bounded.
func (s *QuotaStore) sweep(now int64) {
	s.calls = 0
	for name, k := range s.keys {
		if k.keep < now {
			delete(s.keys, name)
		}
	}
}

// QuotaKey implements backend.QuotaStore.
func (s *QuotaStore) QuotaKey(bucket, rule string) string { return bucket + "\x00" + rule }

// Leave implements backend.QuotaStore.
func (s *QuotaStore) Leave(_ context.Context, member string, keys []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range keys {
		if k := s.keys[name]; k != nil {
			delete(k.members, member)
		}
	}
	return nil
}

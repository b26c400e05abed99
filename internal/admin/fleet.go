package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Directory lists the admin listeners of the instances that share this
// one's backend: pkg/backend/redis.Roster, where each instance announces
// its own.
type Directory interface {
	// Instances returns their addresses ("host:port", or URLs), this
	// instance's included.
	Instances(ctx context.Context) ([]string, error)
}

// Fleet bounds: the instances one view asks, how long it waits for each,
// and the largest status it reads.
const (
	maxFleet          = 64
	fleetTimeout      = 2 * time.Second
	maxPeerStatusSize = 4 << 20
)

// Member is one instance of the fleet view.
type Member struct {
	// Addr is the admin address it was asked at; this instance's own is
	// Options.Advertise ("" when unset).
	Addr string `json:"addr"`
	// Self marks this instance.
	Self bool `json:"self,omitempty"`
	// From says how it was found: "self", "peers" (SLUICE_ADMIN_PEERS) or
	// "redis" (the roster).
	From string `json:"from"`
	// Status is its /api/v1/status; nil when it could not be read.
	Status *Status `json:"status,omitempty"`
	// Error says why it could not be read.
	Error string `json:"error,omitempty"`
	// ConfigDiffers is true when its configuration version is not this
	// instance's.
	ConfigDiffers bool `json:"config_differs,omitempty"`
}

// Fleet is every instance this one can find, with their sums.
type Fleet struct {
	Members []Member `json:"members"`
	// Total adds up the rates of the members that answered.
	Total Totals `json:"total"`
	// Answered and Failed count the members read and not.
	Answered int `json:"answered"`
	Failed   int `json:"failed"`
	// DiscoveryError is why the roster could not be read, if it could not.
	DiscoveryError string `json:"discovery_error,omitempty"`
}

// fleetOn reports whether the server has a fleet to show.
func (s *Server) fleetOn() bool { return len(s.opts.Peers) > 0 || s.opts.Directory != nil }

// fleet gathers every instance it can find: this one (self), the
// configured peers and the roster's instances, each asked for its
// /api/v1/status at once, each bounded by fleetTimeout.
func (s *Server) fleet(ctx context.Context, self Status) Fleet {
	f := Fleet{Members: []Member{{Addr: s.opts.Advertise, Self: true, From: "self", Status: &self}}}
	seen := map[string]bool{}
	if s.opts.Advertise != "" {
		seen[peerURL(s.opts.Advertise, s.opts.TLS != nil)] = true
	}
	add := func(addr, from string) {
		u := peerURL(addr, s.opts.TLS != nil)
		if addr == "" || seen[u] || len(f.Members) >= maxFleet {
			return
		}
		seen[u] = true
		f.Members = append(f.Members, Member{Addr: addr, From: from})
	}
	for _, p := range s.opts.Peers {
		add(p, "peers")
	}
	if s.opts.Directory != nil {
		dctx, cancel := context.WithTimeout(ctx, fleetTimeout)
		addrs, err := s.opts.Directory.Instances(dctx)
		cancel()
		if err != nil {
			f.DiscoveryError = err.Error()
		}
		for _, a := range addrs {
			add(a, "redis")
		}
	}
	var token string
	if s.token != nil {
		if b, err := s.token.get(); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	var wg sync.WaitGroup
	for i := range f.Members[1:] {
		m := &f.Members[i+1]
		wg.Go(func() {
			st, err := s.peerStatus(ctx, peerURL(m.Addr, s.opts.TLS != nil), token)
			if err != nil {
				m.Error = err.Error()
				return
			}
			m.Status = st
		})
	}
	wg.Wait()
	slices.SortStableFunc(f.Members[1:], func(a, b Member) int { return strings.Compare(a.Addr, b.Addr) })
	for i := range f.Members {
		m := &f.Members[i]
		if m.Status == nil {
			f.Failed++
			continue
		}
		f.Answered++
		m.ConfigDiffers = m.Status.Config.Version != self.Config.Version
		f.Total.DecisionsPerSecond += m.Status.Now.DecisionsPerSecond
		f.Total.DenialsPerSecond += m.Status.Now.DenialsPerSecond
		f.Total.ShadowPerSecond += m.Status.Now.ShadowPerSecond
		f.Total.ProblemsPerSecond += m.Status.Now.ProblemsPerSecond
	}
	return f
}

// peerURL is the base URL of the admin listener at addr: addr itself when
// it has a scheme, else http:// (https:// when this listener serves TLS,
// as its peers then do).
func peerURL(addr string, tls bool) string {
	if strings.Contains(addr, "://") {
		return strings.TrimRight(addr, "/")
	}
	if tls {
		return "https://" + addr
	}
	return "http://" + addr
}

// peerClient asks peers; its timeout bounds each whole exchange.
var peerClient = &http.Client{Timeout: fleetTimeout}

// peerStatus reads base's /api/v1/status, with this listener's bearer
// token when it has one (the instances of one deployment share it).
func (s *Server) peerStatus(ctx context.Context, base, token string) (*Status, error) {
	ctx, cancel := context.WithTimeout(ctx, fleetTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/status", nil)
	if err != nil {
		return nil, fmt.Errorf("bad address: %w", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := peerClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	var st Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxPeerStatusSize)).Decode(&st); err != nil {
		return nil, fmt.Errorf("its status is not readable: %w", err)
	}
	return &st, nil
}

// handleFleet answers GET /api/v1/fleet: every instance's status.
func (s *Server) handleFleet(w http.ResponseWriter, r *http.Request) {
	if !s.fleetOn() {
		httpError(w, http.StatusNotFound, "no fleet: set SLUICE_ADMIN_PEERS, or share a Redis with SLUICE_ADMIN_ADVERTISE set on each instance")
		return
	}
	writeJSON(w, http.StatusOK, s.fleet(r.Context(), s.status(r.Context())))
}

package admin

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/hitters"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// maxBody bounds a reset request's body.
const maxBody = 256 << 10

// Entry is one descriptor entry on the wire.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Counters is the answer of GET /api/v1/counters.
type Counters struct {
	Domain  string  `json:"domain"`
	Entries []Entry `json:"entries"`
	// Matched is the config node the descriptor matched; nil when none.
	Matched *Node `json:"matched"`
	// Unlimited is true when the node is `unlimited`.
	Unlimited bool `json:"unlimited,omitempty"`
	// Identity names the state in the backend.
	Identity string `json:"identity,omitempty"`
	// Rules hold one line per rule decided, in order.
	Rules []RuleState `json:"rules"`
	// Allowed says whether a request of cost 1 would be admitted now.
	Allowed bool `json:"allowed"`
	// ConfigVersion identifies the configuration used.
	ConfigVersion string `json:"config_version"`
	// At is when the counters were read.
	At time.Time `json:"at"`
}

// Node locates a config node.
type Node struct {
	Path string `json:"path"`
	File string `json:"file"`
	Line int    `json:"line"`
}

// RuleState is one rule's counter.
type RuleState struct {
	Name      string `json:"name,omitempty"`
	ID        string `json:"id"`
	Algorithm string `json:"algorithm"`
	Limit     uint64 `json:"limit"`
	Period    string `json:"period"`
	// Capacity is the most that can be taken at once (burst, or limit).
	Capacity uint64 `json:"capacity"`
	// Used is Capacity - Remaining: what the rule holds now.
	Used      uint64 `json:"used"`
	Remaining uint64 `json:"remaining"`
	// ResetSeconds: until the rule is whole again.
	ResetSeconds float64   `json:"reset_seconds"`
	ResetAt      time.Time `json:"reset_at"`
	// Binding is true for the rule that would bind a request now.
	Binding bool `json:"binding"`
	// State describes the algorithm's state in words, from the peek: the
	// current window of a fixed or sliding window, the level of a bucket.
	State string `json:"state"`
	// WindowStart and WindowEnd bound the current window (fixed and
	// sliding windows only).
	WindowStart time.Time `json:"window_start,omitzero"`
	WindowEnd   time.Time `json:"window_end,omitzero"`
}

// ResetRequest is the body of POST /api/v1/counters/reset.
type ResetRequest struct {
	Domain  string  `json:"domain"`
	Entries []Entry `json:"entries"`
	// Rule, when set, resets only the rule of this name or id.
	Rule string `json:"rule,omitempty"`
}

// ResetResult is the answer of a reset.
type ResetResult struct {
	Domain  string  `json:"domain"`
	Entries []Entry `json:"entries"`
	// Rules are the ids of the rules reset; Names their names (the id for
	// a rule without a name), in the same order.
	Rules []string `json:"rules"`
	Names []string `json:"names"`
	// After is the counters right after the reset.
	After *Counters `json:"after,omitempty"`
}

// handleCountersGet answers GET /api/v1/counters?domain=D&entry=k=v&...:
// the descriptor's counters, read with a peek (nothing consumed).
func (s *Server) handleCountersGet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	domain := q.Get("domain")
	var entries []Entry
	for _, kv := range q["entry"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("entry %q is not key=value", kv))
			return
		}
		entries = append(entries, Entry{Key: k, Value: v})
	}
	s.audit(r, "counters.get", domain, entries, nil)
	c, status, err := s.counters(r.Context(), domain, entries)
	if err != nil {
		httpError(w, status, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// handleCountersReset answers POST /api/v1/counters/reset.
func (s *Server) handleCountersReset(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		httpError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	var req ResetRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		httpError(w, http.StatusBadRequest, "body is not a reset request: "+err.Error())
		return
	}
	if len(s.opts.Resetters) == 0 {
		httpError(w, http.StatusNotImplemented, "this backend cannot reset counters")
		return
	}
	t, status, err := s.lookup(req.Domain, req.Entries)
	if err != nil {
		s.audit(r, "counters.reset", req.Domain, req.Entries, logrus.Fields{"refused": err.Error()})
		httpError(w, status, err.Error())
		return
	}
	rules := t.Rules
	if req.Rule != "" {
		rules = nil
		for _, rule := range t.Rules {
			if rule.Name == req.Rule || rule.ID() == req.Rule {
				rules = append(rules, rule)
			}
		}
		if len(rules) == 0 {
			err := fmt.Errorf("no rule named %q on this descriptor (rules: %s)", req.Rule, ruleNames(t.Rules))
			s.audit(r, "counters.reset", req.Domain, req.Entries, logrus.Fields{"refused": err.Error()})
			httpError(w, http.StatusNotFound, err.Error())
			return
		}
	}
	ids, names := make([]string, len(rules)), make([]string, len(rules))
	for i, rule := range rules {
		ids[i] = rule.ID()
		names[i] = cmp.Or(rule.Name, ids[i])
	}
	if len(rules) == 0 {
		err := errors.New("nothing to reset: no rule limits this descriptor")
		s.audit(r, "counters.reset", req.Domain, req.Entries, logrus.Fields{"refused": err.Error()})
		httpError(w, http.StatusNotFound, err.Error())
		return
	}
	for _, rs := range s.opts.Resetters {
		if err := rs.Reset(r.Context(), t.Identity, rules); err != nil {
			s.audit(r, "counters.reset", req.Domain, req.Entries, logrus.Fields{"rules": ids, "failed": err.Error()})
			httpError(w, http.StatusServiceUnavailable, "reset failed: "+err.Error())
			return
		}
	}
	s.audit(r, "counters.reset", req.Domain, req.Entries, logrus.Fields{"rules": ids, "done": true})
	res := ResetResult{Domain: req.Domain, Entries: req.Entries, Rules: ids, Names: names}
	if c, _, err := s.counters(r.Context(), req.Domain, req.Entries); err == nil {
		res.After = c
	}
	writeJSON(w, http.StatusOK, res)
}

// lookup resolves a descriptor, with the HTTP status of a failure.
func (s *Server) lookup(domain string, entries []Entry) (service.Target, int, error) {
	if domain == "" {
		return service.Target{}, http.StatusBadRequest, errors.New("domain is required")
	}
	if len(entries) == 0 {
		return service.Target{}, http.StatusBadRequest, errors.New("at least one entry is required")
	}
	des := make([]descriptor.Entry, len(entries))
	for i, e := range entries {
		des[i] = descriptor.Entry{Key: e.Key, Value: e.Value}
	}
	t, err := s.opts.Looker.Lookup(domain, des)
	switch {
	case errors.Is(err, service.ErrUnknownDomain):
		return t, http.StatusNotFound, err
	case err != nil:
		return t, http.StatusBadRequest, err
	}
	return t, http.StatusOK, nil
}

// counters reads a descriptor's counters with one peek.
func (s *Server) counters(ctx context.Context, domain string, entries []Entry) (*Counters, int, error) {
	t, status, err := s.lookup(domain, entries)
	if err != nil {
		return nil, status, err
	}
	now := s.opts.Now()
	c := &Counters{Domain: domain, Entries: entries, Unlimited: t.Unlimited, Identity: t.Identity,
		Rules: []RuleState{}, Allowed: true, ConfigVersion: s.version(t.Config), At: now.UTC()}
	if t.Node != nil {
		c.Matched = &Node{Path: domain + "." + t.Node.Path(), File: t.Node.File, Line: t.Node.Line}
	}
	if len(t.Rules) == 0 {
		return c, http.StatusOK, nil
	}
	if s.opts.Backend == nil {
		return nil, http.StatusNotImplemented, errors.New("no backend to read counters from")
	}
	res := s.opts.Backend.Decide(ctx, []backend.Check{{Identity: t.Identity, Rules: t.Rules, Cost: limit.Cost{N: 0}}})
	if len(res) != 1 || res[0].Err != nil {
		err := errors.New("backend returned no result")
		if len(res) == 1 {
			err = res[0].Err
		}
		return nil, http.StatusServiceUnavailable, fmt.Errorf("read counters: %w", err)
	}
	d := res[0].Decision
	for i, rule := range t.Rules {
		var o limit.Outcome
		if i < len(d.Outcomes) {
			o = d.Outcomes[i]
		}
		capacity := rule.Capacity()
		rs := RuleState{
			Name: rule.Name, ID: rule.ID(), Algorithm: rule.Algorithm.String(), Limit: rule.Limit,
			Period: period(rule), Capacity: capacity, Used: capacity - min(capacity, o.Remaining),
			Remaining: o.Remaining, ResetSeconds: o.Reset.Seconds(), ResetAt: now.Add(o.Reset).UTC(),
		}
		describeState(&rs, rule, now)
		c.Rules = append(c.Rules, rs)
		if o.Remaining == 0 {
			c.Allowed = false
		}
	}
	// A peek admits; the rule binding a request of cost 1 is the one with
	// the least remaining (ties: longest reset), as limit.Decision says.
	if d.Binding >= 0 && d.Binding < len(c.Rules) {
		c.Rules[d.Binding].Binding = true
	}
	return c, http.StatusOK, nil
}

// describeState fills rs.State (and the window of windowed algorithms)
// from the rule and the peeked numbers.
func describeState(rs *RuleState, r limit.Rule, now time.Time) {
	switch r.Algorithm {
	case limit.FixedWindow, limit.SlidingWindow:
		start, end := r.Window(limit.MicrosOf(now))
		rs.WindowStart, rs.WindowEnd = time.UnixMicro(int64(start)).UTC(), time.UnixMicro(int64(end)).UTC()
		what := "counted in the window"
		if r.Algorithm == limit.SlidingWindow {
			what = "counted (this window plus the previous one's weighted share)"
		}
		rs.State = fmt.Sprintf("%d %s %s to %s", rs.Used, what,
			rs.WindowStart.Format("2006-01-02T15:04:05Z"), rs.WindowEnd.Format("2006-01-02T15:04:05Z"))
	case limit.SlidingLog:
		rs.State = fmt.Sprintf("%d admitted in the last %s", rs.Used, rs.Period)
	default: // the meters
		rs.State = fmt.Sprintf("bucket holds %d of %d, drains %d per %s", rs.Used, rs.Capacity, r.Limit, rs.Period)
	}
}

// period names a rule's period: "1 minute", "5 minutes".
func period(r limit.Rule) string {
	m := max(1, r.Multiplier)
	if m == 1 {
		return "1 " + r.Unit.String()
	}
	return fmt.Sprintf("%d %ss", m, r.Unit.String())
}

// version names a config by a hash of its dump, computed once per config.
func (s *Server) version(c *descriptor.Config) string {
	if c == nil {
		return "none"
	}
	s.verMu.Lock()
	defer s.verMu.Unlock()
	if c != s.verCfg {
		sum := sha256.Sum256([]byte(c.Dump()))
		s.verCfg, s.ver = c, hex.EncodeToString(sum[:6])
	}
	return s.ver
}

// audit logs a counters request with who asked: the remote address, the
// client certificate's subject (mTLS), whether a token was presented, and
// the operator the client names itself (X-Sluice-Operator, self-declared).
func (s *Server) audit(r *http.Request, action, domain string, entries []Entry, extra logrus.Fields) {
	f := logrus.Fields{
		"audit":      action,
		"domain":     domain,
		"descriptor": formatEntries(entries),
		"remote":     r.RemoteAddr,
		"user_agent": r.UserAgent(),
	}
	if op := r.Header.Get("X-Sluice-Operator"); op != "" {
		f["operator"] = op
	}
	if s.token != nil {
		f["token"] = true
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cert := r.TLS.PeerCertificates[0]
		f["client_cert"] = cert.Subject.String()
		if len(cert.DNSNames) > 0 {
			f["client_cert_dns"] = strings.Join(cert.DNSNames, ",")
		}
	}
	for k, v := range extra {
		f[k] = v
	}
	s.log.WithFields(f).Info("admin: " + action)
}

// formatEntries writes "k=v,k2=v2" (for logs; values are written as
// given, quoted by the logger when needed).
func formatEntries(entries []Entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.Key + "=" + e.Value
	}
	return strings.Join(parts, ",")
}

func ruleNames(rules []limit.Rule) string {
	var names []string
	for _, r := range rules {
		n := r.ID()
		if r.Name != "" {
			n = r.Name + " (" + n + ")"
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// queryChoice returns what the query parameter name selects among choices
// (the key "" is its default). Any other value is answered with 400 Bad
// Request saying the parameter must be one of allowed, and ok is false.
func queryChoice[T any](w http.ResponseWriter, q url.Values, name string, choices map[string]T, allowed string) (v T, ok bool) {
	v, ok = choices[q.Get(name)]
	if !ok {
		httpError(w, http.StatusBadRequest, name+" must be "+allowed)
	}
	return v, ok
}

// handleTop answers GET /api/v1/top?by=denials|hits&window=1m|1h&domain=&rule=&n=.
func (s *Server) handleTop(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	kind, ok := queryChoice(w, q, "by", map[string]hitters.Kind{"": hitters.Denials, "denials": hitters.Denials, "hits": hitters.Hits}, "denials or hits")
	if !ok {
		return
	}
	window, ok := queryChoice(w, q, "window", map[string]hitters.Window{"": hitters.Minute, "1m": hitters.Minute, "1h": hitters.Hour}, "1m or 1h")
	if !ok {
		return
	}
	n := 20
	if v := q.Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
			httpError(w, http.StatusBadRequest, "n must be a number from 1 to 1000")
			return
		}
	}
	out := struct {
		By     string          `json:"by"`
		Window string          `json:"window"`
		Top    []hitters.Entry `json:"top"`
	}{By: map[hitters.Kind]string{hitters.Denials: "denials", hitters.Hits: "hits"}[kind], Window: window.String(), Top: []hitters.Entry{}}
	if s.opts.Top != nil {
		out.Top = append(out.Top, s.opts.Top.Top(kind, window, q.Get("domain"), q.Get("rule"), n)...)
	}
	writeJSON(w, http.StatusOK, out)
}

// Status is the answer of GET /api/v1/status.
type Status struct {
	Instance Info          `json:"instance"`
	Uptime   string        `json:"uptime"`
	Config   ConfigStatus  `json:"config"`
	Backend  BackendStatus `json:"backend"`
	Rates    []Rate        `json:"rates"`
	// Now is every domain's last full 10 s added up.
	Now Totals `json:"now"`
	// Problems are the reasons calls or descriptors went wrong.
	Problems []Problem `json:"problems"`
}

// Totals are an instance's rates over the last full 10 s, every domain
// added up.
type Totals struct {
	DecisionsPerSecond float64 `json:"decisions_per_second"`
	DenialsPerSecond   float64 `json:"denials_per_second"`
	ShadowPerSecond    float64 `json:"shadow_denials_per_second"`
	ProblemsPerSecond  float64 `json:"problems_per_second"`
}

// ConfigStatus is the configuration in use and the last reload.
type ConfigStatus struct {
	Version     string    `json:"version"`
	Domains     []string  `json:"domains"`
	Reloads     uint64    `json:"reloads"`
	Failures    uint64    `json:"failures"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	LastFailure time.Time `json:"last_failure,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
}

// BackendStatus is a Ping of the backend, timed.
type BackendStatus struct {
	Kind    string `json:"kind"`
	Healthy bool   `json:"healthy"`
	// State says it in words: "in process" (the embedded backend, nothing
	// to reach), "answering" (the ping succeeded) or "not answering" (it
	// failed, with Error).
	State string `json:"state"`
	// LatencyMS is how long the ping took: until the answer when healthy,
	// until the failure otherwise.
	LatencyMS float64 `json:"latency_ms"`
	Error     string  `json:"error,omitempty"`
}

// The backend states.
const (
	stateInProcess = "in process"
	stateAnswering = "answering"
	stateDown      = "not answering"
)

// pingTimeout bounds the backend ping of a status request.
const pingTimeout = 2 * time.Second

// status gathers the instance's status.
func (s *Server) status(ctx context.Context) Status {
	now := s.opts.Now()
	st := Status{Instance: s.opts.Info, Rates: []Rate{}}
	if !s.opts.Info.Started.IsZero() {
		st.Uptime = now.Sub(s.opts.Info.Started).Truncate(time.Second).String()
	}
	cfg := s.opts.Looker.Config()
	st.Config.Version = s.version(cfg)
	st.Config.Domains = []string{}
	if cfg != nil {
		st.Config.Domains = cfg.Domains()
	}
	if s.opts.Reloads != nil {
		rs := s.opts.Reloads()
		st.Config.Reloads, st.Config.Failures = rs.Successes, rs.Failures
		st.Config.LastSuccess, st.Config.LastFailure = rs.LastSuccess, rs.LastFailure
		if rs.LastError != nil {
			st.Config.LastError = rs.LastError.Error()
		}
	}
	st.Backend.Kind = s.opts.Info.Backend
	if s.opts.Backend != nil {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		start := time.Now()
		err := s.opts.Backend.Ping(pctx)
		st.Backend.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
		cancel()
		st.Backend.Healthy = err == nil
		st.Backend.State = stateAnswering
		if err != nil {
			st.Backend.Error = err.Error()
			st.Backend.State = stateDown
		} else if st.Backend.Kind == "memory" {
			st.Backend.State = stateInProcess
		}
	}
	st.Problems = []Problem{}
	if s.opts.Observer != nil {
		st.Rates = s.opts.Observer.Rates()
		st.Problems = s.opts.Observer.Problems()
	}
	for _, r := range st.Rates {
		if n := len(r.Decisions); n > 0 {
			st.Now.DecisionsPerSecond += r.Decisions[n-1]
			st.Now.DenialsPerSecond += r.Denials[n-1]
			st.Now.ShadowPerSecond += r.Shadow[n-1]
		}
	}
	for _, p := range st.Problems {
		st.Now.ProblemsPerSecond += p.PerSecond
	}
	return st
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.status(r.Context()))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// httpError answers {"error": msg} with code.
func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func sortRates(rs []Rate) {
	slices.SortFunc(rs, func(a, b Rate) int { return strings.Compare(a.Domain, b.Domain) })
}

package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/identity"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// kind says how one request descriptor is answered.
type kind uint8

const (
	kindUnknownDomain kind = iota // domain not configured
	kindNoLimit                   // no node, no rules, or all rules replaced
	kindUnlimited                 // node is unlimited
	kindCheck                     // rules decided by a backend
	kindInvalid                   // the descriptor is malformed: answered OVER_LIMIT
)

// failed says how a failed check was answered.
type failed uint8

const (
	notFailed   failed = iota
	failedOpen         // FailureAllow
	failedShut         // FailureDeny
	failedLocal        // FailureLocal: decided by Options.Local
)

// item is the service's working state for one request descriptor.
type item struct {
	entries  []descriptor.Entry
	node     *descriptor.Node
	override bool
	clamped  bool // an override longer than MaxOverridePeriod, decided per YEAR
	kind     kind
	invalid  string       // what is wrong with the descriptor (kindInvalid)
	rules    []limit.Rule // the rules decided (kindCheck)
	cost     limit.Cost
	check    int // index into work.checks; -1 when none
	quota    bool
	shadow   bool // the node's shadow_mode

	dec    limit.Decision // the decision, when err is nil
	err    error          // the backend's error, if it failed
	failed failed         // how a failure was answered

	over     bool // the status is reported OVER_LIMIT
	shadowed bool // denied, but reported OK because of shadow

	uncharged bool // all-or-nothing gave back (or never took) its cost

	debit bool // the descriptor carries its own hits_addend above 0
}

// work holds one request's scratch space, pooled between requests.
type work struct {
	items    []item
	entries  []descriptor.Entry
	ids      []descriptor.Entry // entries with share_threshold values replaced
	rules    []limit.Rule
	replaces []string
	checks   []backend.Check
	local    []backend.Check
	localIdx []int
	viewBuf  []view

	together  bool            // the main backend decided w.checks as one
	refunds   []backend.Check // all-or-nothing's compensating refunds
	refundIdx []int           // the item of each refund
	refused   string          // the bound the request was refused for (RefusedRules)
}

// reset drops every reference the work holds and keeps its capacity.
func (w *work) reset() {
	clear(w.items)
	clear(w.entries)
	clear(w.ids)
	clear(w.rules)
	clear(w.replaces)
	clear(w.checks)
	clear(w.local)
	clear(w.viewBuf)
	w.items, w.entries, w.ids, w.rules = w.items[:0], w.entries[:0], w.ids[:0], w.rules[:0]
	w.replaces, w.checks, w.local, w.localIdx = w.replaces[:0], w.checks[:0], w.local[:0], w.localIdx[:0]
	w.viewBuf = w.viewBuf[:0]
	clear(w.refunds)
	w.refunds, w.refundIdx, w.together, w.refused = w.refunds[:0], w.refundIdx[:0], false, ""
}

// shouldRateLimit does the work of ShouldRateLimit with scratch space w,
// for a request validate accepted.
func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest, w *work) (*rlsv3.RateLimitResponse, bool, error) {
	dom := s.cfg.Load().Domain(req.Domain)
	s.plan(req, dom, w)
	if err := s.checkRules(w); err != nil {
		return nil, false, err
	}
	if s.log.IsLevelEnabled(logrus.DebugLevel) {
		for i := range w.items {
			if it := &w.items[i]; it.kind == kindInvalid {
				s.log.WithField("domain", req.Domain).Debug("service: invalid descriptor answered OVER_LIMIT: " + it.invalid)
			}
		}
	}
	if len(w.checks) > 0 {
		if err := s.decide(ctx, dom, w); err != nil {
			return nil, false, err
		}
		if s.opts.AllOrNothing {
			s.undoCharges(ctx, w)
		}
		s.warnUnchargedDebit(req.Domain, w)
	}
	resp, shadowForced := s.respond(req, w)
	if s.opts.Observer != nil {
		s.observe(req.Domain, dom, w)
	}
	return resp, shadowForced, nil
}

// checkRules refuses a request whose descriptors' rules weigh more than
// Bounds.MaxRequestRules (backend.Weight: a rule weighs 1, a sliding log
// backend.SlidingLogWeight), before any is decided: Redis serves no one
// else while it runs a script call, and the rules of a request are decided
// in a few (all in one when decided together), so the weight bounds the
// time one request holds Redis (decisions 0081 and 0095).
func (s *Service) checkRules(w *work) error {
	bound := s.opts.Bounds.MaxRequestRules
	if bound <= 0 {
		return nil
	}
	n, weight := 0, 0
	for i := range w.checks { // a local check's rules are some of its check's
		n += len(w.checks[i].Rules)
		weight += backend.Weight(w.checks[i].Rules)
	}
	if weight <= bound {
		return nil
	}
	w.refused = RefusedRules
	if weight == n {
		return status.Errorf(codes.InvalidArgument, "rate limit request asks for %d rules, more than the limit of %d (SLUICE_MAX_REQUEST_RULES)", n, bound)
	}
	return status.Errorf(codes.InvalidArgument, "rate limit request asks for %d rules weighing %d (a sliding log weighs %d), more than the limit of %d (SLUICE_MAX_REQUEST_RULES)",
		n, weight, backend.SlidingLogWeight, bound)
}

// plan fills w.items (one per descriptor, in request order) and w.checks
// (one per descriptor whose rules a backend decides).
func (s *Service) plan(req *rlsv3.RateLimitRequest, dom *descriptor.Domain, w *work) {
	n := len(req.Descriptors)
	if cap(w.items) < n {
		w.items = make([]item, n)
	}
	w.items = w.items[:n]
	if dom == nil {
		for i := range w.items {
			w.items[i] = item{kind: kindUnknownDomain, check: -1}
		}
		return
	}
	total := 0
	for _, d := range req.Descriptors {
		total += len(d.GetEntries()) // d may be nil: invalidDescriptor says so below
	}
	if cap(w.entries) < total {
		w.entries = make([]descriptor.Entry, 0, total)
	}
	maxEntries := max(s.opts.Bounds.MaxEntries, dom.Depth())
	for i, d := range req.Descriptors {
		it := &w.items[i]
		if why := s.invalidDescriptor(i, d, maxEntries); why != "" {
			*it = item{kind: kindInvalid, invalid: why, check: -1}
			continue
		}
		start := len(w.entries)
		for _, e := range d.Entries {
			w.entries = append(w.entries, descriptor.Entry{Key: e.Key, Value: e.Value})
		}
		*it = item{entries: w.entries[start:len(w.entries):len(w.entries)], check: -1, cost: costOf(d, req.HitsAddend), quota: s.opts.QuotaMode,
			debit: d.GetHitsAddend().GetValue() > 0 && !d.IsNegativeHits}
		if d.Limit != nil {
			r, clamped := overrideRule(d.Limit, s.opts.IgnoreOverrideUnitMultiplier)
			w.rules = append(w.rules, r)
			it.override, it.clamped, it.kind, it.rules = true, clamped, kindCheck, w.rules[len(w.rules)-1:len(w.rules):len(w.rules)]
			it.cost.Charge = s.charges(nil, false, it.debit)
			if clamped {
				s.clampLog.warn(s.log.WithFields(logrus.Fields{"domain": req.Domain, "descriptor": entryKeys(it.entries),
					"unit": d.Limit.Unit.String(), "unit_multiplier": d.Limit.GetUnitMultiplier().GetValue()}),
					"a limit override's period is longer than one YEAR (365 days): it is decided as requests_per_unit per YEAR", nil)
			}
			continue
		}
		node := dom.Match(it.entries)
		it.node, it.kind = node, kindNoLimit
		if node == nil {
			continue
		}
		it.quota = it.quota || node.QuotaMode
		it.cost.Charge = s.charges(node, it.quota, it.debit)
		it.shadow = node.ShadowMode
		w.replaces = append(w.replaces, node.Replaces...)
		switch {
		case node.Unlimited:
			it.kind = kindUnlimited
		case len(node.Rules) > 0:
			it.kind, it.rules = kindCheck, node.Rules
		}
	}
	if len(w.replaces) > 0 {
		w.applyReplaces()
	}
	for i := range w.items {
		it := &w.items[i]
		if it.kind != kindCheck {
			continue
		}
		it.check = len(w.checks)
		w.checks = append(w.checks, backend.Check{Identity: w.identity(req.Domain, it), Rules: it.rules, Cost: it.cost})
	}
}

// warnUnchargedDebit logs, at most once per interval, a descriptor's own
// hits_addend that was denied without being charged where the config does
// not say so: on a node without charge_over_limit, or on a limit override,
// under SLUICE_CHARGE_OVER_LIMIT=false (the only setting that leaves such
// a cost uncharged). It is the signature of a check-then-debit quota (a
// peek on the request path, the cost on the response path) that never
// binds: an uncharged denial never takes a counter past its limit, so
// every later peek is admitted. sluice cannot tell it from a request-path
// cost rightly refused, so it says so instead of failing open in silence;
// charge_over_limit on the node (true or false) answers the question and
// ends the warning.
func (s *Service) warnUnchargedDebit(domain string, w *work) {
	for i := range w.items {
		it := &w.items[i]
		if !it.debit || it.kind != kindCheck || (it.node != nil && it.node.ChargeOverLimit != nil) || it.err != nil ||
			it.cost.Charge || it.dec.Allowed || len(it.dec.Outcomes) == 0 {
			continue
		}
		where := "limit override on " + entryKeys(it.entries)
		if it.node != nil {
			where = it.node.Path()
		}
		s.debitLog.warn(s.log.WithFields(logrus.Fields{"domain": domain, "descriptor": where, "hits_addend": it.cost.N,
			"remaining": it.dec.BindingOutcome().Remaining}),
			"a hits_addend larger than what is left was denied and not charged (SLUICE_CHARGE_OVER_LIMIT=false), "+
				"so a peek (hits_addend 0) is still admitted: if Envoy debits this descriptor after the response "+
				"(apply_on_stream_done, a response cost), its quota never binds. "+
				"Set charge_over_limit: true on the descriptor (or leave SLUICE_CHARGE_OVER_LIMIT unset) to charge it; "+
				"charge_over_limit: false says the cost is checked before the request and ends this warning", nil)
		return
	}
}

// entryKeys names a descriptor by its entries' keys (key1.key2...), for a
// log line about a descriptor that matched no node; values stay out of
// the log.
func entryKeys(entries []descriptor.Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
	}
	return b.String()
}

// applyReplaces drops every matched rule whose name some matched node
// replaces (envoyproxy/ratelimit's `replaces`, across the whole request).
func (w *work) applyReplaces() {
	for i := range w.items {
		it := &w.items[i]
		if it.kind != kindCheck || it.override {
			continue
		}
		drop := 0
		for _, r := range it.rules {
			if w.replaced(r.Name) {
				drop++
			}
		}
		if drop == 0 {
			continue
		}
		if drop == len(it.rules) {
			it.kind, it.rules = kindNoLimit, nil
			continue
		}
		start := len(w.rules)
		for _, r := range it.rules {
			if !w.replaced(r.Name) {
				w.rules = append(w.rules, r)
			}
		}
		it.rules = w.rules[start:len(w.rules):len(w.rules)]
	}
}

func (w *work) replaced(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range w.replaces {
		if r == name {
			return true
		}
	}
	return false
}

// identity encodes it's state identity: the request's entries, with the
// value of every level whose matched node has share_threshold replaced by
// the node's pattern, so that all matching values share one counter.
func (w *work) identity(domain string, it *item) string {
	shared := false
	for x := it.node; x != nil; x = x.Parent {
		shared = shared || x.ShareThreshold
	}
	if !shared {
		return identity.Encode(domain, it.entries)
	}
	w.ids = append(w.ids[:0], it.entries...)
	for x := it.node; x != nil; x = x.Parent {
		if x.ShareThreshold && x.Depth >= 1 && x.Depth <= len(w.ids) {
			w.ids[x.Depth-1].Value = x.Value
		}
	}
	return identity.Encode(domain, w.ids)
}

// decide runs every check through the backend in one call and applies the
// domain's failure mode to the checks it could not decide. It returns the
// gRPC error the whole call must answer, if any.
func (s *Service) decide(ctx context.Context, dom *descriptor.Domain, w *work) error {
	results := s.decideChecks(ctx, w)
	logged := false
	for i := range w.items {
		it := &w.items[i]
		if it.check < 0 {
			continue
		}
		var r backend.Result
		if it.check < len(results) {
			r = results[it.check]
		} else {
			r.Err = fmt.Errorf("backend returned %d results for %d checks: %w", len(results), len(w.checks), backend.ErrUnavailable)
		}
		if r.Err == nil {
			it.dec = r.Decision
			continue
		}
		it.err = r.Err
		if !logged {
			// The backend's own words (Redis's WRONGPASS, OOM, READONLY,
			// ...) reach the log, at most one line per interval.
			logged = true
			s.errLog.warn(s.log.WithFields(logrus.Fields{"domain": dom.Name, "failure_mode": dom.FailureMode.String()}),
				"backend could not decide; the domain's failure_mode answers", r.Err)
		}
		switch dom.FailureMode {
		case descriptor.FailureAllow:
			it.failed = failedOpen
		case descriptor.FailureDeny:
			it.failed = failedShut
		case descriptor.FailureLocal:
			if s.opts.Local == nil {
				return backendStatus(dom, r.Err)
			}
			w.localIdx = append(w.localIdx, i)
			w.local = append(w.local, backend.Check{Identity: w.checks[it.check].Identity, Rules: s.localRules(it.rules), Cost: it.cost})
		default:
			return backendStatus(dom, r.Err)
		}
	}
	if len(w.local) == 0 {
		return nil
	}
	local := s.opts.Local.Decide(ctx, w.local)
	for j, i := range w.localIdx {
		it := &w.items[i]
		if j >= len(local) || local[j].Err != nil {
			err := it.err
			if j < len(local) {
				err = fmt.Errorf("%w; local fallback: %w", err, local[j].Err)
			}
			return backendStatus(dom, err)
		}
		// Keep it.rules: the status reports the configured rule, not its
		// local share. Keep it.err for the Observer.
		it.dec, it.failed = local[j].Decision, failedLocal
	}
	return nil
}

// localRules returns rules with Limit and Burst divided by LocalInstances
// (rounded up, never below 1 unless the limit is 0, which keeps blocking).
func (s *Service) localRules(rules []limit.Rule) []limit.Rule {
	n := uint64(s.opts.LocalInstances)
	out := make([]limit.Rule, len(rules))
	copy(out, rules)
	if n <= 1 {
		return out
	}
	div := func(v uint64) uint64 {
		if v == 0 {
			return 0
		}
		return max(1, v/n+min(1, v%n))
	}
	for i := range out {
		out[i].Limit = div(out[i].Limit)
		out[i].Burst = div(out[i].Burst)
	}
	return out
}

// backendStatus is the gRPC error answered when the backend cannot decide
// for dom and its failure mode says to fail the call.
func backendStatus(dom *descriptor.Domain, err error) error {
	code := codes.Unavailable
	if errors.Is(err, context.Canceled) {
		code = codes.Canceled
	}
	return status.Errorf(code, "rate limit domain %q: backend could not decide: %v", dom.Name, err)
}

// observe reports every item to the Observer.
func (s *Service) observe(domain string, dom *descriptor.Domain, w *work) {
	for i := range w.items {
		it := &w.items[i]
		ev := DescriptorEvent{Domain: domain, Entries: it.entries, Node: it.node, Override: it.override,
			OverrideClamped: it.clamped, Shadow: it.shadowed}
		switch it.kind {
		case kindUnknownDomain:
			ev.Outcome = OutcomeUnknownDomain
		case kindNoLimit:
			ev.Outcome = OutcomeNoLimit
		case kindUnlimited:
			ev.Outcome = OutcomeUnlimited
		case kindInvalid:
			ev.Outcome = OutcomeInvalid
		case kindCheck:
			ev.Cost, ev.Rules, ev.Decision, ev.BackendErr = it.cost, it.rules, it.dec, it.err
			ev.FailureMode = dom.FailureMode
			ev.Outcome = OutcomeOK
			if it.over || it.shadowed {
				ev.Outcome = OutcomeOverLimit
			}
		}
		s.opts.Observer.Descriptor(ev)
	}
}

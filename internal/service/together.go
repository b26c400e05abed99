package service

import (
	"context"
	"errors"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// This file is the request-level all-or-nothing of Options.AllOrNothing
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT): when any descriptor of a
// request is denied, none of the request's descriptors keeps a charge.
//
// A backend that implements backend.TogetherDecider decides the request's
// checks as one, atomically, when it can (the embedded backend always; a
// Redis backend when every check lives on one node). Otherwise the backend
// decides them as usual
// (each descriptor atomically, on its own); the service then refunds what
// the admitted descriptors consumed. Between the decision and the refunds
// (one more backend round trip) other requests see those charges and may
// be denied by them; a refund that fails leaves its charge in place
// (logged), which errs towards denying, never towards admitting more.

// errShortResults is the error of a refund the backend returned no result
// for.
var errShortResults = errors.New("backend returned fewer results than checks")

// decideChecks runs w.checks through the main backend: together when
// all-or-nothing is on and the backend can, else one by one.
func (s *Service) decideChecks(ctx context.Context, w *work) []backend.Result {
	if s.opts.AllOrNothing {
		if td, ok := s.opts.Backend.(backend.TogetherDecider); ok {
			if results, ok := td.DecideTogether(ctx, w.checks); ok {
				w.together = true
				return results
			}
		}
	}
	return s.opts.Backend.Decide(ctx, w.checks)
}

// denied reports whether it is a checked descriptor that the backend, or
// its domain's failure mode, denied (shadowed or not: the reference stops
// charging whenever a key is over its limit, whatever shadow mode says).
func (it *item) denied() bool {
	if it.kind == kindInvalid {
		return true // answered OVER_LIMIT: the request is denied
	}
	if it.kind != kindCheck {
		return false
	}
	switch it.failed {
	case failedShut:
		return true
	case failedOpen:
		return false
	}
	return !it.dec.Allowed
}

// charged reports whether it consumed something that a refund can give
// back.
func (it *item) charged() bool {
	if it.kind != kindCheck || it.uncharged || !it.dec.Allowed || it.cost.N == 0 || it.cost.Refund {
		return false
	}
	return it.failed == notFailed || it.failed == failedLocal
}

// undoCharges gives back what the request's admitted descriptors consumed
// when any of its descriptors was denied. A refunded descriptor reports
// the state after its refund (OK, with what is really left).
func (s *Service) undoCharges(ctx context.Context, w *work) {
	anyDenied := false
	for i := range w.items {
		anyDenied = anyDenied || w.items[i].denied()
	}
	if !anyDenied {
		return
	}
	if w.together {
		// The backend decided the main checks as one: if one of them was
		// denied, none consumed. Only local fallbacks and failure-mode
		// denials can have left charges.
		mainDenied := false
		for i := range w.items {
			it := &w.items[i]
			mainDenied = mainDenied || (it.denied() && it.failed == notFailed)
		}
		for i := range w.items {
			if it := &w.items[i]; mainDenied && it.failed == notFailed {
				it.uncharged = true
			}
		}
	}
	s.refund(ctx, w, notFailed, s.opts.Backend)
	if s.opts.Local != nil {
		s.refund(ctx, w, failedLocal, s.opts.Local)
	}
}

// refund refunds, through b, the charged items that were decided with
// failure state f.
func (s *Service) refund(ctx context.Context, w *work, f failed, b backend.Backend) {
	w.refunds, w.refundIdx = w.refunds[:0], w.refundIdx[:0]
	for i := range w.items {
		it := &w.items[i]
		if it.failed != f || !it.charged() {
			continue
		}
		rules := it.rules
		if f == failedLocal {
			rules = s.localRules(it.rules)
		}
		w.refundIdx = append(w.refundIdx, i)
		w.refunds = append(w.refunds, backend.Check{
			Identity: w.checks[it.check].Identity, Rules: rules, Cost: limit.Cost{N: it.cost.N, Refund: true},
		})
	}
	if len(w.refunds) == 0 {
		return
	}
	results := b.Decide(ctx, w.refunds)
	for j, i := range w.refundIdx {
		it := &w.items[i]
		if j >= len(results) || results[j].Err != nil {
			err := errShortResults
			if j < len(results) {
				err = results[j].Err
			}
			s.refundLog.warn(s.log, "all-or-nothing: a refund failed, so an admitted descriptor of a denied request stays charged", err)
			continue
		}
		it.dec, it.uncharged = results[j].Decision, true
	}
	w.shareLastRefund()
}

// shareLastRefund makes the copies of one descriptor in a request report
// the same state: the refunds of its copies were decided one after the
// other, each seeing the state after the refunds before it, so every copy
// reports the state after the last one (what is really left). Refunds
// that failed keep their own decision.
func (w *work) shareLastRefund() {
	if len(w.refundIdx) < 2 {
		return
	}
	last := make(map[string]limit.Decision, len(w.refundIdx))
	for j := len(w.refundIdx) - 1; j >= 0; j-- {
		it := &w.items[w.refundIdx[j]]
		if !it.uncharged {
			continue
		}
		key := w.refunds[j].Identity
		for _, r := range w.refunds[j].Rules {
			key += "\x00" + r.ID()
		}
		if d, seen := last[key]; seen {
			it.dec = d
		} else {
			last[key] = it.dec
		}
	}
}

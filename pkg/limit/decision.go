package limit

import "time"

// Cost is what one request asks of a descriptor's rules, in the units the
// rules' Limit and Burst count (hits_addend: requests, bytes, tokens...).
// The zero Cost is a peek: it reports without consuming.
type Cost struct {
	// N is the amount. 0 is a peek: report without consuming.
	N uint64
	// Refund gives N back instead of taking it (is_negative_hits). A refund
	// never raises a rule above its capacity and is always admitted.
	Refund bool
	// Charge takes N even when it does not fit: the debit of a
	// check-then-debit quota (a peek on the request path, the real cost on
	// the response path), which must bind. A charged cost that does not fit
	// is reported denied but consumed by every rule: a window's count or a
	// sliding log's total passes the limit (up to MaxCharge), a bucket's
	// level passes its capacity, and later costs are denied until the
	// window or the drain pays it back. Outcomes then describe the state
	// after the charge (Reset: until the rule is whole again). Ignored for
	// refunds and peeks. docs/algorithms.md, "Charging costs that do not fit".
	Charge bool
}

// Outcome is one rule's answer to one request. See the package doc for the
// exact meaning of Remaining and Reset. The zero Outcome is a denial with
// nothing remaining and no reset; it is what BindingOutcome returns when
// there are no rules.
type Outcome struct {
	// Allowed reports whether this rule alone could admit the cost.
	Allowed bool
	// Remaining is the whole cost still admissible now, after this request
	// if the request was admitted, in units of cost.
	Remaining uint64
	// Reset: admitted → until the rule is whole again; denied → until the
	// same cost would be admitted. Whole microseconds, at most
	// MaxWaitMicros.
	Reset time.Duration
}

// Decision is the all-or-nothing answer for all rules of one descriptor.
// Decide returns one; a backend that computes Outcomes itself sets Allowed
// and Binding with Bind. The zero Decision is a denial naming no rule:
// call Bind (or Decide) rather than rely on it. A Decision is a value; its
// Outcomes slice is owned by the Decision and must not be shared with a
// writer.
type Decision struct {
	// Allowed is true only if every rule admitted the cost. When false, no
	// rule consumed anything, unless the cost was charged (Cost.Charge).
	Allowed bool
	// Binding is the index, in the rules given, of the rule that binds: on
	// denial the denied rule with the longest Reset (waiting that long
	// satisfies every denied rule); otherwise the rule with the least
	// Remaining, ties broken by the longest Reset, then the lowest index.
	// -1 when there are no rules.
	Binding int
	// Outcomes holds one Outcome per rule, in the order given.
	Outcomes []Outcome
}

// BindingOutcome returns the binding rule's Outcome, or the zero Outcome
// when there are no rules.
func (d Decision) BindingOutcome() Outcome {
	if d.Binding < 0 || d.Binding >= len(d.Outcomes) {
		return Outcome{}
	}
	return d.Outcomes[d.Binding]
}

// Bind fills d.Allowed and d.Binding from d.Outcomes, following the rule
// documented on Decision. Backends call it so they agree on the choice.
func (d *Decision) Bind() {
	d.Allowed = true
	d.Binding = -1
	for _, o := range d.Outcomes {
		if !o.Allowed {
			d.Allowed = false
		}
	}
	for i, o := range d.Outcomes {
		if d.Binding < 0 {
			if d.Allowed || !o.Allowed {
				d.Binding = i
			}
			continue
		}
		b := d.Outcomes[d.Binding]
		if !d.Allowed {
			if !o.Allowed && o.Reset > b.Reset {
				d.Binding = i
			}
			continue
		}
		if o.Remaining < b.Remaining || (o.Remaining == b.Remaining && o.Reset > b.Reset) {
			d.Binding = i
		}
	}
}

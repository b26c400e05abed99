package service

import "github.com/sluice-rl/sluice/pkg/descriptor"

// Charging is the global SLUICE_CHARGE_OVER_LIMIT: which costs that do not
// fit are charged (limit.Cost.Charge) where the config does not say. A
// node's charge_over_limit always wins; a quota_mode node that does not
// set it charges every cost; Charging decides for every other node and for
// limit overrides (which have no node). docs/decisions/0073 says why the
// default is ChargeDebits.
type Charging uint8

const (
	// ChargeDebits, the default (SLUICE_CHARGE_OVER_LIMIT unset), charges a
	// descriptor's own hits_addend above 0. That field is how every cost
	// Envoy computes reaches the service (a route rate limit's hits_addend,
	// a number or a format), and the only way a response-path debit
	// (apply_on_stream_done) can: charging it is what makes a
	// check-then-debit quota bind, as the incumbent's increment-first does.
	// A cost that comes from the request's hits_addend, or the default 1,
	// stays all-or-nothing: denied, it consumes nothing.
	ChargeDebits Charging = iota
	// ChargeAll (SLUICE_CHARGE_OVER_LIMIT=true) charges every cost that
	// does not fit, as the incumbent does.
	ChargeAll
	// ChargeNone (SLUICE_CHARGE_OVER_LIMIT=false) charges no cost that does
	// not fit: all-or-nothing everywhere but on quota nodes. A denied debit
	// left uncharged this way is logged (warnUnchargedDebit).
	ChargeNone
)

// String returns the setting's value as written: "true", "false", or
// "unset" for the default.
func (c Charging) String() string {
	switch c {
	case ChargeAll:
		return "true"
	case ChargeNone:
		return "false"
	}
	return "unset"
}

// charges reports whether a cost that does not fit is charged: node's
// charge_over_limit when it says (node is nil for a limit override), else
// for a quota descriptor, else as Options.ChargeOverLimit says, where
// debit is whether the cost is the descriptor's own hits_addend.
func (s *Service) charges(node *descriptor.Node, quota, debit bool) bool {
	if node != nil && node.ChargeOverLimit != nil {
		return *node.ChargeOverLimit
	}
	if quota {
		return true
	}
	switch s.opts.ChargeOverLimit {
	case ChargeAll:
		return true
	case ChargeNone:
		return false
	}
	return debit
}

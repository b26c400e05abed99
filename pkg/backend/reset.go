package backend

import (
	"context"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// Resetter is implemented by backends that can forget the state of one
// descriptor, for operators unblocking a client. It is optional: callers
// type-assert a Backend to it and say so when a backend cannot reset.
type Resetter interface {
	// Reset forgets the state that rules keep for identity (each rule's
	// state is the one limit.Rule.Key names), so that the next check of
	// those rules starts from nothing, as if identity had never been seen.
	// The state of other rules of the same identity (a limit override, a
	// rule of another configuration) is kept. A reset racing with checks
	// of the same identity is ordered with them: each check sees the state
	// either before or after it, never half of it. It returns an error
	// wrapping ErrUnavailable when the store cannot be reached.
	Reset(ctx context.Context, identity string, rules []limit.Rule) error
}

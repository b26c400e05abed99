package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// fill reads c's reply into the results of its items, and says whether
// the node answered (with decisions, an error about this call, or a
// passing refusal: see liveRefusal) or could not be reached. The breaker
// counts the calls that were not answered.
func (b *Backend) fill(results []backend.Result, c *call, outcomes []limit.Outcome) (answered bool) {
	err := c.err
	if err != nil {
		werr := b.callErr(err)
		for _, it := range c.items {
			results[it.result].Err = werr
		}
		return nodeAnswered(err)
	}
	ints := c.reply
	down := 0
	for _, it := range c.items {
		res := &results[it.result]
		out := outcomes[it.out : it.out+it.rules]
		if !c.batch {
			d, perr := parseDecideInts(ints, out)
			if perr != nil {
				res.Err = fmt.Errorf("redis backend: %w", perr)
			} else {
				res.Decision = d
			}
			continue
		}
		d, rest, perr := parseBatchInts(ints, out)
		ints = rest
		switch {
		case perr == nil:
			res.Decision = d
		case errors.Is(perr, errReply):
			res.Err = fmt.Errorf("redis backend: %w", perr)
		default:
			// The script failed this descriptor (a command failing inside
			// it: OOM at its first write, a key of the wrong type): the
			// error reply its own call would have got, classified alike.
			ierr := scriptError(perr.Error())
			res.Err = b.callErr(ierr)
			if !nodeAnswered(ierr) {
				down++
			}
		}
	}
	return down < len(c.items)
}

// callErr wraps err, the error of a call (or the script's error for one
// of its descriptors), for its results: with ErrUnavailable when Redis
// cannot decide now.
func (b *Backend) callErr(err error) error {
	if !isUnavailable(err) {
		return fmt.Errorf("redis backend: decide script: %w", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v: %w", b.opts.Timeout, err)
	} else if strings.Contains(err.Error(), "unauthenticated") {
		// Redis refuses a long command from a client that has not
		// authenticated with a protocol error, not NOAUTH.
		err = fmt.Errorf("the server requires a password, none was given (REDIS_AUTH): %w", err)
	} else {
		err = b.explain(err)
	}
	return fmt.Errorf("redis backend: %w: %w", backend.ErrUnavailable, err)
}

// explain puts in front of err what it means for this deployment, when
// go-redis's own words would mislead: a single Redis that answers READONLY
// is a replica (sluice writes, so REDIS_URL must name the master), and a
// Sentinel client whose every sentinel answered "no such master" was given
// a master name no sentinel knows, not sentinels that are down. Any other
// error is returned as it is.
func (b *Backend) explain(err error) error {
	switch {
	case b.opts.Type == TypeSingle && goredis.IsReadOnlyError(err):
		return fmt.Errorf("the Redis at REDIS_URL is a read-only replica, and sluice writes its counters: "+
			"REDIS_URL must reach the master (behind a name that follows failovers, this passes once it does; "+
			"REDIS_TYPE=sentinel follows them itself): %w", err)
	case b.opts.Type == TypeSentinel && sentinelsKnowNoMaster(err):
		name, _, _ := strings.Cut(b.opts.URL, ",")
		return fmt.Errorf("no sentinel knows a master named %q (the first part of REDIS_URL): %w", strings.TrimSpace(name), err)
	}
	return err
}

// sentinelsUnreachable is in go-redis's error when no sentinel gave the
// master's address.
const sentinelsUnreachable = "all sentinels specified in configuration are unreachable"

// sentinelsKnowNoMaster reports whether err is go-redis's failure to find
// the master through the sentinels where every sentinel answered, with no
// address for the master's name.
func sentinelsKnowNoMaster(err error) bool {
	if !strings.Contains(err.Error(), sentinelsUnreachable) {
		return false
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return false
	}
	errs := joined.Unwrap()
	for _, e := range errs {
		if !errors.Is(e, goredis.Nil) {
			return false
		}
	}
	return len(errs) > 0
}

// nodeAnswered reports whether err, a call's error, means the node answered
// for its breaker: an error about the call, or a passing refusal.
func nodeAnswered(err error) bool { return !isUnavailable(err) || liveRefusal(err) }

// isUnavailable reports whether err means Redis cannot decide now (and a
// later try may succeed), as opposed to Redis answering that this call is
// wrong.
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if strings.Contains(err.Error(), sentinelsUnreachable) {
		// No sentinel gave the master's address; when they all answered
		// (an unknown master name), the error wraps their redis.Nil
		// replies, which must not read as a reply of the master.
		return true
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return true // transport, timeout, pool exhausted, client closed
	}
	return goredis.IsClusterDownError(err) || goredis.IsLoadingError(err) ||
		goredis.IsMasterDownError(err) || goredis.IsTryAgainError(err) ||
		goredis.IsReadOnlyError(err) || goredis.IsMaxClientsError(err) ||
		goredis.IsOOMError(err) || goredis.IsAuthError(err) ||
		goredis.IsNoReplicasError(err) ||
		goredis.HasErrorPrefix(err, "NOSCRIPT") || goredis.HasErrorPrefix(err, "BUSY") ||
		goredis.HasErrorPrefix(err, "MOVED") || goredis.HasErrorPrefix(err, "ASK")
}

// liveRefusal reports whether err is a reply by which a live node refuses
// a call at once, for a state that ends by itself, and ends everywhere at
// the same moment: the cluster is down (CLUSTERDOWN: a master failed and
// its replica is not promoted yet, so with cluster-require-full-coverage
// every node refuses every key), a slot is moving (TRYAGAIN, MOVED, ASK),
// the node is loading its data set (LOADING), or a failover is under way
// (MASTERDOWN, READONLY). The call fails (with ErrUnavailable), but the
// node's breaker does not count it: failing the node's calls fast would
// spare nobody a wait, and would keep them failing for up to an open
// period after the state ended. Refusals that more calls would make worse
// or that do not pass by themselves (OOM, BUSY, max clients, auth) count.
func liveRefusal(err error) bool {
	return goredis.IsClusterDownError(err) || goredis.IsTryAgainError(err) ||
		goredis.IsLoadingError(err) || goredis.IsMasterDownError(err) ||
		goredis.IsReadOnlyError(err) ||
		goredis.HasErrorPrefix(err, "MOVED") || goredis.HasErrorPrefix(err, "ASK")
}

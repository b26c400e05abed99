package redis

import (
	"errors"
	"strings"

	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// Key returns the Redis key holding one rule's state for one descriptor:
//
//	<prefix>{<identity>}             every rule but a sliding log
//	<prefix>{<identity>}:<rule id>   a sliding log
//
// The counters of all of a descriptor's rules (fixed and sliding windows,
// the meters) are records of one string value, so one GET and one SET serve
// any number of rules; a sliding log is a sorted set of its own
// (docs/decisions/0013-one-counter-key.md). The braces are a Redis Cluster
// hash tag: only the identity decides the slot, so every key of a
// descriptor lives on one node and one script may touch them all. The
// identity (pkg/identity) is injective, bounded and brace-free, so the tag is
// exactly the identity; the rule id (limit.Rule.ID, which names a counter's
// record too) changes with the algorithm, period or time zone and not with
// the limit, so raising a limit keeps the usage counted. The window is
// stored in the value, not the key name, so the script's KEYS name every key
// it touches (docs/decisions/0004-redis-key-schema.md).
func Key(prefix, identity string, r limit.Rule) string {
	if !scripts.OwnsKey(r) {
		return CounterKey(prefix, identity)
	}
	id := r.ID()
	var b strings.Builder
	b.Grow(len(prefix) + len(identity) + len(id) + 3)
	b.WriteString(prefix)
	b.WriteByte('{')
	b.WriteString(identity)
	b.WriteString("}:")
	b.WriteString(id)
	return b.String()
}

// CounterKey returns the key holding the counters of one descriptor's
// rules: <prefix>{<identity>}.
func CounterKey(prefix, identity string) string {
	return prefix + "{" + identity + "}"
}

// checkIdentity rejects identities that would not make a sound hash tag:
// an empty one ("{}" makes Redis hash the whole key, scattering a
// descriptor's rules over slots) or one holding a brace.
func checkIdentity(identity string) error {
	if identity == "" {
		return errors.New("empty descriptor identity")
	}
	if strings.ContainsAny(identity, "{}") {
		return errors.New("descriptor identity contains '{' or '}'")
	}
	return nil
}

// checkRule rejects rules whose id cannot be computed.
func checkRule(r limit.Rule) error {
	if r.Algorithm < limit.FixedWindow || r.Algorithm > limit.GCRA {
		return errors.New("rule has an unknown algorithm")
	}
	if r.Unit < limit.UnitUnknown || r.Unit > limit.Year {
		return errors.New("rule has an unknown unit")
	}
	return nil
}

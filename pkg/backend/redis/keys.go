package redis

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// Keys (CONTRACT.md, "Keys"): every key of a descriptor is
//
//	<prefix>{<identity>}             the counters of every rule but a sliding log
//	<prefix>{<identity>}:<rule id>   a sliding log's sorted set
//
// The braces are a Redis Cluster hash tag, so every key of a descriptor
// lives in one slot and one script call may touch them all. appendKeys
// builds a call's KEYS on the backend's production path; stateKey and
// CounterKey build one key with the same code, for tests and tools.

// checkIdentity rejects a descriptor identity that would not make a sound
// hash tag: an empty one ("{}" makes Redis hash the whole key, scattering a
// descriptor's keys over slots) or one holding a brace. Identities built by
// pkg/identity always pass.
func checkIdentity(identity string) error {
	if identity == "" {
		return errors.New("empty descriptor identity")
	}
	if strings.ContainsAny(identity, "{}") {
		return errors.New("descriptor identity contains '{' or '}'")
	}
	return nil
}

// ownsKey reports whether r keeps its state in a key of its own (a sliding
// log's sorted set) instead of a record of the descriptor's counter key.
// A rule without a period keeps no state at all.
func ownsKey(r limit.Rule) bool {
	return r.Algorithm == limit.SlidingLog && r.PeriodMicros() > 0
}

// appendKeys appends the KEYS of one decide call to dst: the descriptor's
// counter key, then the key of each rule that ownsKey, in rule order. All
// of them are slices of one string, so a call costs one allocation
// whatever its number of rules. It fails for an identity checkIdentity
// refuses. prefix must hold no brace (the Redis backend's options check it).
func appendKeys(dst []string, prefix, identity string, rules []*ruleArgs) ([]string, error) {
	if err := checkIdentity(identity); err != nil {
		return dst, err
	}
	tag := len(prefix) + len(identity) + 2 // <prefix>{<identity>}
	size := tag
	for _, a := range rules {
		if a.ownKey {
			size += tag + 1 + len(a.idString)
		}
	}
	var sb strings.Builder
	sb.Grow(size)
	writeTag := func() {
		sb.WriteString(prefix)
		sb.WriteByte('{')
		sb.WriteString(identity)
		sb.WriteByte('}')
	}
	writeTag()
	for _, a := range rules {
		if a.ownKey {
			writeTag()
			sb.WriteByte(':')
			sb.WriteString(a.idString)
		}
	}
	all := sb.String()
	dst = append(dst, all[:tag])
	off := tag
	for _, a := range rules {
		if a.ownKey {
			n := tag + 1 + len(a.idString)
			dst = append(dst, all[off:off+n])
			off += n
		}
	}
	return dst, nil
}

// CounterKey returns the key holding the state of every rule of one
// descriptor but a sliding log, <prefix>{<identity>}: KEYS[1] of its
// decide calls. Every key of the descriptor (a sliding log's is
// <CounterKey>:<rule id>) hashes to its Redis Cluster slot.
func CounterKey(prefix, identity string) string {
	return prefix + "{" + identity + "}"
}

// stateKey returns the Redis key holding r's state for the descriptor identity:
// CounterKey, or the sliding log's own key. It fails for a rule
// prepareRule refuses or an identity checkIdentity refuses.
func stateKey(prefix, identity string, r limit.Rule) (string, error) {
	a, err := prepareRule(r)
	if err != nil {
		return "", err
	}
	keys, err := appendKeys(nil, prefix, identity, []*ruleArgs{a})
	if err != nil {
		return "", err
	}
	return keys[len(keys)-1], nil
}

// resetArgs returns the KEYS and ARGV of one reset call (scripts.ResetScript) that
// forgets the state rules keep for identity: the counter key then the
// sliding logs' keys; the id of each counter rule, whose records go
// (CONTRACT.md, "The reset script"). Rules with the same id are named
// once. It fails for a rule prepareRule refuses or an identity
// checkIdentity refuses.
func resetArgs(prefix, identity string, rules []limit.Rule) (keys []string, argv []any, err error) {
	prepared := make([]*ruleArgs, 0, len(rules))
	seen := map[string]bool{}
	for i, r := range rules {
		a, err := prepareRule(r)
		if err != nil {
			return nil, nil, fmt.Errorf("rule %d: %w", i, err)
		}
		if seen[a.idString] {
			continue
		}
		seen[a.idString] = true
		if a.ownKey {
			prepared = append(prepared, a)
		} else {
			argv = append(argv, a.idString)
		}
	}
	keys, err = appendKeys(nil, prefix, identity, prepared)
	if err != nil {
		return nil, nil, err
	}
	return keys, argv, nil
}

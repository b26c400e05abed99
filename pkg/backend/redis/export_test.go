package redis

import (
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// Key is scripts.Key for rules and identities the tests know are valid.
func Key(prefix, identity string, r limit.Rule) string {
	k, err := scripts.Key(prefix, identity, r)
	if err != nil {
		panic(err)
	}
	return k
}

// CounterKey is scripts.CounterKey.
func CounterKey(prefix, identity string) string { return scripts.CounterKey(prefix, identity) }

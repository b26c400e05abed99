package redis

import (
	"github.com/sluice-rl/sluice/pkg/limit"
)

// Key is stateKey for rules and identities the tests know are valid.
func Key(prefix, identity string, r limit.Rule) string {
	k, err := stateKey(prefix, identity, r)
	if err != nil {
		panic(err)
	}
	return k
}

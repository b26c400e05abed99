package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/pkg/scripts"
)

// loadDecideLibrary loads the decide script's function library into c's
// Redis (replacing an older one) and returns it.
func loadDecideLibrary(t *testing.T, c *goredis.Client) scripts.Library {
	t.Helper()
	lib := scripts.DecideLibrary()
	if err := c.FunctionLoadReplace(context.Background(), lib.Source).Err(); err != nil {
		t.Fatal(err)
	}
	return lib
}

// decideCall sends one decide call: FCALL of lib's function when fcall is
// set, else EVAL of the script.
func decideCall(ctx context.Context, c *goredis.Client, lib scripts.Library, fcall bool, keys []string, args []any) *goredis.Cmd {
	if fcall {
		return c.FCall(ctx, lib.Function, keys, args...)
	}
	return c.Eval(ctx, scripts.DecideScript().Source, keys, args...)
}

// evalTail ends the decide script's source (scripts.DecideScript): the
// line that runs decide_call.
const evalTail = "return decide_call(KEYS, ARGV)\n"

// newScript returns a script variant of source src, named by its SHA-1 as
// scripts.DecideScript is.
func newScript(src string) scripts.Script {
	sum := sha1.Sum([]byte(src))
	return scripts.Script{Source: src, SHA1: hex.EncodeToString(sum[:])}
}

// newLibrary wraps a script variant's parts (its source less evalTail) as
// a function library named after its SHA-1 sha, as scripts.DecideLibrary
// wraps the decide script.
func newLibrary(parts, sha string) scripts.Library {
	l := scripts.Library{Name: "sluice_" + sha[:16], Function: "sluice_decide_" + sha[:16]}
	l.Source = "#!lua name=" + l.Name + "\n" + parts +
		"redis.register_function('" + l.Function + "', decide_call)\n"
	return l
}

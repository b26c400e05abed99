package scripts

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// loadDecideLibrary loads the decide script's function library into c's
// Redis (replacing an older one) and returns it.
func loadDecideLibrary(t *testing.T, c *redis.Client) Library {
	t.Helper()
	lib := DecideLibrary()
	if err := c.FunctionLoadReplace(context.Background(), lib.Source).Err(); err != nil {
		t.Fatal(err)
	}
	return lib
}

// decideCall sends one decide call: FCALL of lib's function when fcall is
// set, else EVAL of the script.
func decideCall(ctx context.Context, c *redis.Client, lib Library, fcall bool, keys []string, args []any) *redis.Cmd {
	if fcall {
		return c.FCall(ctx, lib.Function, keys, args...)
	}
	return c.Eval(ctx, DecideScript().Source, keys, args...)
}

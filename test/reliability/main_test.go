package reliability

import (
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// discard is go-redis's logger for these tests: its dial failures while a
// test has killed Redis on purpose are expected by the thousand.
type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	goredis.SetLogger(discard{}) // process-wide; this test binary's own wiring
	os.Exit(m.Run())
}

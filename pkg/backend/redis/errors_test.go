package redis

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
)

// TestRedisErrorsReachTheCaller: when Redis refuses a decision, the
// Result.Err carries Redis's own words (WRONGPASS, OOM, the refusal of an
// unauthenticated client), with and
// without coalescing, instead of a reply the client could not read.
func TestRedisErrorsReachTheCaller(t *testing.T) {
	auth := redistest.Standalone(t, "--requirepass", "secret")
	oom := redistest.Standalone(t, "--maxmemory", "1", "--maxmemory-policy", "noeviction")
	tests := []struct {
		name string
		addr string
		auth string
		want string
	}{
		{"wrong password", auth.Addr(), "wrong", "WRONGPASS"},
		// Redis answers an unauthenticated client's long command with a
		// protocol error, not NOAUTH; the backend says what it means.
		{"no password", auth.Addr(), "", "the server requires a password, none was given (REDIS_AUTH): ERR Protocol error: unauthenticated"},
		{"out of memory", oom.Addr(), "", "OOM"},
	}
	for _, tt := range tests {
		for _, co := range []bool{false, true} {
			t.Run(tt.name+"/coalesce="+onOff(co), func(t *testing.T) {
				b := newBackend(t, Options{URL: tt.addr, Auth: tt.auth, DisableCoalescing: !co,
					Breaker: BreakerOptions{Failures: -1}})
				res := decideOne(b, "errors|user=a")
				if res.Err == nil {
					t.Fatalf("decided %+v, want an error holding %s", res.Decision, tt.want)
				}
				if !strings.Contains(res.Err.Error(), tt.want) {
					t.Errorf("err %q, want Redis's own %s", res.Err, tt.want)
				}
				if strings.Contains(res.Err.Error(), "unexpected decide reply") {
					t.Errorf("err %q: Redis's refusal read as a malformed reply", res.Err)
				}
			})
		}
	}
}

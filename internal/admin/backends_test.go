package admin

import (
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/denycache"
	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// TestCountersOnEveryBackend: the counters API looks a client's counter up
// without consuming and resets it, on the memory backend, Redis
// standalone, Sentinel and Cluster, and Redis behind the denial cache
// (which must forget the cached denial).
func TestCountersOnEveryBackend(t *testing.T) {
	quiet := stacktest.QuietLogger()
	newRedis := func(t *testing.T, o redis.Options) backend.Backend {
		o.KeyPrefix, o.Logger = "admin-"+strings.ReplaceAll(t.Name(), "/", "-")+":", quiet
		b, err := redis.New(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	tests := []struct {
		name string
		new  func(t *testing.T) backend.Backend
	}{
		{"memory", func(t *testing.T) backend.Backend { return stacktest.Memory(t, memory.Options{}) }},
		{"redis", func(t *testing.T) backend.Backend {
			return newRedis(t, redis.Options{URL: redistest.Standalone(t).Addr()})
		}},
		{"redis+denycache", func(t *testing.T) backend.Backend {
			return denycache.New(newRedis(t, redis.Options{URL: redistest.Standalone(t).Addr()}), denycache.Options{})
		}},
		{"sentinel", func(t *testing.T) backend.Backend {
			s := redistest.Sentinel(t)
			return newRedis(t, redis.Options{Type: redis.TypeSentinel, URL: s.MasterName() + "," + strings.Join(s.SentinelAddrs(), ",")})
		}},
		{"cluster", func(t *testing.T) backend.Backend {
			c := redistest.Cluster(t, redistest.ClusterOptions{})
			return newRedis(t, redis.Options{Type: redis.TypeCluster, URL: strings.Join(c.Addrs(), ",")})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixtureOn(t, testenv.NewClock(time.Now()), tc.new(t), Options{})
			// ip: 100 per hour; 100 hits at once, then one more denied.
			req := stacktest.Request("api", stacktest.WithAddend(stacktest.Descriptor("ip", "10.1.2.3"), 100))
			for i, want := range []string{"OK", "OVER_LIMIT", "OVER_LIMIT"} {
				resp, err := f.svc.ShouldRateLimit(context.Background(), req)
				if err != nil || resp.GetOverallCode().String() != want {
					t.Fatalf("call %d: %v %v, want %s", i+1, resp.GetOverallCode(), err, want)
				}
				req = stacktest.Request("api", stacktest.Descriptor("ip", "10.1.2.3"))
			}
			for range 2 { // a lookup consumes nothing: twice the same answer
				code, body := testenv.HTTPGet(t, f.base+"/api/v1/counters?domain=api&entry=ip=10.1.2.3")
				if code != 200 || !strings.Contains(body, `"used": 100`) || !strings.Contains(body, `"remaining": 0`) || !strings.Contains(body, `"path": "api.ip"`) {
					t.Fatalf("lookup: %d %s", code, body)
				}
			}
			resp, err := http.Post(f.base+"/api/v1/counters/reset", "application/json",
				strings.NewReader(`{"domain":"api","entries":[{"key":"ip","value":"10.1.2.3"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), `"used": 0`) {
				t.Fatalf("reset: %d %s", resp.StatusCode, body)
			}
			got, err := f.svc.ShouldRateLimit(context.Background(), req)
			if err != nil || got.GetOverallCode().String() != "OK" || got.Statuses[0].LimitRemaining != 99 {
				t.Errorf("after the reset: %v remaining %d %v, want OK with 99 left", got.GetOverallCode(), got.GetStatuses()[0].GetLimitRemaining(), err)
			}
		})
	}
}

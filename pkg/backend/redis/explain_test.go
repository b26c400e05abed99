package redis

import (
	"context"
	"strings"
	"testing"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// A misconfigured REDIS_URL is named for what it is, at start and in every
// decision's error (an unavailable one), where go-redis's words mislead: a
// single Redis that is a replica (it answers READONLY: "not reachable" was
// wrong), and a Sentinel master name no sentinel knows ("all sentinels ...
// unreachable" was wrong: every sentinel answered, and the decisions'
// errors read as the master refusing the call, not as unavailable).
func TestMisconfiguredURLExplained(t *testing.T) {
	s := redistest.Sentinel(t)
	for _, tc := range []struct {
		name      string
		opts      Options
		start     string // the start warning's message
		want      string // in the start warning's error and in the decision's
		functions bool
	}{
		{name: "a replica as the single Redis", opts: Options{URL: s.ReplicaAddr(), Functions: true},
			start: "redis: answered at start with an error", want: "the Redis at REDIS_URL is a read-only replica"},
		{name: "a replica, scripts only", opts: Options{URL: s.ReplicaAddr()},
			want: "the Redis at REDIS_URL is a read-only replica"},
		{name: "a master name no sentinel knows",
			opts:  Options{Type: TypeSentinel, URL: "nosuchmaster," + strings.Join(s.SentinelAddrs(), ",")},
			start: "redis: answered at start with an error", want: `no sentinel knows a master named "nosuchmaster"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, hook := logtest.NewNullLogger()
			tc.opts.Logger = log
			tc.opts.DisableCoalescing = true
			b := newBackend(t, tc.opts)
			if tc.start != "" {
				found := false
				for _, e := range hook.AllEntries() {
					if e.Message == tc.start+"; retrying in the background, decisions fail until it answers" {
						err, _ := e.Data["error"].(error)
						found = err != nil && strings.Contains(err.Error(), tc.want)
					}
				}
				if !found {
					t.Errorf("no start warning %q with %q among %d log entries", tc.start, tc.want, len(hook.AllEntries()))
					for _, e := range hook.AllEntries() {
						t.Logf("%s %v", e.Message, e.Data)
					}
				}
			}
			res := b.Decide(context.Background(), []backend.Check{{Identity: "u", Rules: []limit.Rule{{Unit: limit.Second, Limit: 5}}, Cost: limit.Cost{N: 1}}})
			if err := res[0].Err; err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), backend.ErrUnavailable.Error()) {
				t.Errorf("decision error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// functionRules are three rules of a descriptor: the general path (a token
// bucket) and the window path (fixed windows only).
var functionRules = map[string][]limit.Rule{
	"mixed": {
		{Unit: limit.Second, Limit: 10},
		{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 1000},
		{Algorithm: limit.SlidingWindow, Unit: limit.Day, Limit: 10000},
	},
	"fixed": {{Unit: limit.Second, Limit: 10}, {Unit: limit.Minute, Limit: 100}, {Unit: limit.Hour, Limit: 1000}},
}

// decideN decides n checks of rules, one Decide each, and fails on any
// error or on a decision other than the nth admission's.
func decideN(t *testing.T, b *Backend, id string, rules []limit.Rule, n int) {
	t.Helper()
	for i := range n {
		res := b.Decide(context.Background(), []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: 1}}})
		if res[0].Err != nil || !res[0].Allowed || res[0].Outcomes[0].Remaining != uint64(9-i) {
			t.Fatalf("%s check %d: %+v", id, i, res[0])
		}
	}
}

// TestFunctionsOneFcallPerCheck: with Options.Functions, each check costs
// Redis exactly one FCALL of this version's function (no EVALSHA, no EVAL),
// and the library is loaded once; without it, one EVALSHA each and no
// FCALL. Both decide the same: each admits and counts down.
func TestFunctionsOneFcallPerCheck(t *testing.T) {
	for name, rules := range functionRules {
		for _, functions := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/functions=%v", name, functions), func(t *testing.T) {
				srv := redistest.Standalone(t)
				rc := srv.Client()
				b := newBackend(t, Options{URL: srv.Addr(), Functions: functions, DisableCoalescing: true})
				if err := rc.ConfigResetStat(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				const n = 5
				decideN(t, b, "u", rules, n)
				stats := redistest.CommandCalls(t, rc)
				want := map[string]int{"fcall": n, "evalsha": 0, "eval": 0}
				if !functions {
					want = map[string]int{"fcall": 0, "evalsha": n, "eval": 0}
				}
				for cmd, w := range want {
					if stats[cmd] != w {
						t.Errorf("commandstats %v: %s=%d, want %d", stats, cmd, stats[cmd], w)
					}
				}
				libs, err := rc.FunctionList(context.Background(), goredis.FunctionListQuery{}).Result()
				if err != nil {
					t.Fatal(err)
				}
				loaded := len(libs) == 1 && libs[0].Name == scripts.DecideLibrary().Name
				if loaded != functions {
					t.Errorf("libraries loaded: %+v, want the decide library: %v", libs, functions)
				}
			})
		}
	}
}

// TestFunctionsReloadedWhenMissing: a node that lost the library
// (FUNCTION FLUSH, a restart without persistence, a failover to a node that
// never had it) answers "Function not found"; the backend loads the
// library again and the call is retried, invisibly to the caller, and the
// next calls are FCALLs again.
func TestFunctionsReloadedWhenMissing(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	ctx := context.Background()
	b := newBackend(t, Options{URL: srv.Addr(), Functions: true, DisableCoalescing: true})
	decideN(t, b, "u", functionRules["fixed"], 2)
	if err := rc.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res := b.Decide(ctx, []backend.Check{{Identity: "u", Rules: functionRules["fixed"], Cost: limit.Cost{N: 1}}})
	if res[0].Err != nil || !res[0].Allowed || res[0].Outcomes[0].Remaining != 7 {
		t.Fatalf("after FUNCTION FLUSH: %+v, want admitted with 7 left", res[0])
	}
	res = b.Decide(ctx, []backend.Check{{Identity: "u", Rules: functionRules["fixed"], Cost: limit.Cost{N: 1}}})
	if res[0].Err != nil || res[0].Outcomes[0].Remaining != 6 {
		t.Fatalf("next: %+v, want 6 left", res[0])
	}
	stats := redistest.CommandCalls(t, rc)
	// fcall counts the refused call too: 1 refused + 1 retried + 1 next.
	if stats["function|load"] != 1 || stats["fcall"] != 3 || stats["evalsha"] != 0 || stats["eval"] != 0 {
		t.Errorf("commandstats %v: want function|load=1, fcall=3 (one refused), no evalsha or eval", stats)
	}
}

// TestFunctionsRefusedFallsBackToEvalsha: a Redis user whose ACL forbids
// FUNCTION, at start or later, decides with EVALSHA (EVAL for the call that
// met the refusal) and the backend warns once; nobody sees an error.
func TestFunctionsRefusedFallsBackToEvalsha(t *testing.T) {
	for _, when := range []string{"at start", "later"} {
		t.Run(when, func(t *testing.T) {
			srv := redistest.Standalone(t)
			rc := srv.Client()
			ctx := context.Background()
			if err := rc.Do(ctx, "acl", "setuser", "lim", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
				t.Fatal(err)
			}
			if when == "at start" {
				if err := rc.Do(ctx, "acl", "setuser", "lim", "-function", "-fcall").Err(); err != nil {
					t.Fatal(err)
				}
			}
			log, hook := logtest.NewNullLogger()
			b := newBackend(t, Options{URL: srv.Addr(), Auth: "lim:pw", Functions: true, DisableCoalescing: true, Logger: log})
			if when == "later" {
				decideN(t, b, "u", functionRules["fixed"], 1)
				if err := rc.Do(ctx, "acl", "setuser", "lim", "-function", "-fcall").Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := rc.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				res := b.Decide(ctx, []backend.Check{{Identity: "v", Rules: functionRules["mixed"], Cost: limit.Cost{N: 1}}})
				if res[0].Err != nil || !res[0].Allowed || res[0].Outcomes[0].Remaining != uint64(9-i) {
					t.Fatalf("check %d: %+v", i, res[0])
				}
			}
			stats := redistest.CommandCalls(t, rc)
			wantEvalsha, wantEval := 3, 0
			if when == "later" {
				wantEvalsha, wantEval = 2, 1 // the refused FCALL is sent again with EVAL
			}
			if stats["evalsha"] != wantEvalsha || stats["eval"] != wantEval {
				t.Errorf("commandstats %v: want evalsha=%d eval=%d", stats, wantEvalsha, wantEval)
			}
			warnings := 0
			for _, e := range hook.AllEntries() {
				if strings.Contains(e.Message, "cannot use the decide function library") {
					warnings++
				}
			}
			if warnings != 1 {
				t.Errorf("%d warnings that functions cannot be used, want exactly 1", warnings)
			}
		})
	}
}

// TestFunctionsCluster: on a 3-master cluster the library is loaded on
// every master, checks on every master are FCALLs, and a master that lost
// it gets it again.
func TestFunctionsCluster(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{})
	ctx := context.Background()
	b := newBackend(t, Options{Type: "cluster", URL: strings.Join(c.Addrs(), ","), Functions: true, DisableCoalescing: true})
	ids := c.OnePerMaster(t, func(i int) string { return CounterKey("", fmt.Sprintf("c%d", i)) })
	decided := func(want uint64) {
		t.Helper()
		for _, i := range ids {
			id := fmt.Sprintf("c%d", i)
			res := b.Decide(ctx, []backend.Check{{Identity: id, Rules: functionRules["fixed"], Cost: limit.Cost{N: 1}}})
			if res[0].Err != nil || res[0].Outcomes[0].Remaining != want {
				t.Fatalf("%s: %+v, want %d left", id, res[0], want)
			}
		}
	}
	decided(9)
	master := c.Masters()[0]
	if err := c.NodeClient(master).FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	decided(8)
	for _, m := range c.Masters() {
		libs, err := c.NodeClient(m).FunctionList(ctx, goredis.FunctionListQuery{}).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(libs) != 1 || libs[0].Name != scripts.DecideLibrary().Name {
			t.Errorf("master %s holds libraries %+v, want the decide library", m, libs)
		}
		if s := redistest.CommandCalls(t, c.NodeClient(m)); s["fcall"] == 0 || s["evalsha"] != 0 {
			t.Errorf("master %s commandstats %v: want FCALLs and no EVALSHA", m, s)
		}
	}
}

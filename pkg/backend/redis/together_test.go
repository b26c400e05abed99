package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// evalshaCalls reads how many EVALSHA calls a Redis node has served.
func evalshaCalls(t *testing.T, info string) string {
	t.Helper()
	m := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return "0"
	}
	return m[1]
}

// On one node, a request's checks are decided together in the one batched
// script call Decide would send: a denial leaves the admitted check
// uncharged with no second call.
func TestDecideTogetherOneScriptCall(t *testing.T) {
	srv := redistest.Standalone(t)
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "together:", DisableCoalescing: true})
	ctx := context.Background()
	ten := []limit.Rule{{Unit: limit.Hour, Limit: 10}}
	one := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
	checks := []backend.Check{{Identity: "a", Rules: ten, Cost: limit.Cost{N: 1}}, {Identity: "b", Rules: one, Cost: limit.Cost{N: 1}}}
	if res := b.Decide(ctx, checks[1:]); res[0].Err != nil || !res[0].Allowed {
		t.Fatalf("exhaust b: %+v", res)
	}
	rc := srv.Client()
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, ok := b.DecideTogether(ctx, checks)
	if !ok || len(res) != 2 || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("DecideTogether: ok=%v %+v", ok, res)
	}
	if !res[0].Allowed || res[0].BindingOutcome().Remaining != 10 || res[1].Allowed {
		t.Errorf("DecideTogether: %+v, want a peeked (10 left) and b denied", res)
	}
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := evalshaCalls(t, info); got != "1" {
		t.Errorf("EVALSHA calls for a denied request decided together: %s, want 1 (no refunds)", got)
	}
	if res := b.Decide(ctx, []backend.Check{{Identity: "a", Rules: ten}}); res[0].BindingOutcome().Remaining != 10 {
		t.Errorf("a after the denied request: %+v, want 10 left", res)
	}
}

// On a cluster, checks of several identities (their own slots) are
// declined, deciding nothing; a request of one check is decided.
func TestDecideTogetherClusterDeclinesSeveral(t *testing.T) {
	c := cluster.Get(t)
	opts := clusterOptions(c)
	opts.KeyPrefix = "together:"
	b := newBackend(t, opts)
	ctx := context.Background()
	rules := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
	run := fmt.Sprintf("%s/%016x/", t.Name(), rand.Uint64()) // the shared cluster outlives one run
	a := backend.Check{Identity: run + "a", Rules: rules, Cost: limit.Cost{N: 1}}
	z := backend.Check{Identity: run + "z", Rules: rules, Cost: limit.Cost{N: 1}}
	if res, ok := b.DecideTogether(ctx, []backend.Check{a, z}); ok || res != nil {
		t.Fatalf("two identities on a cluster: ok=%v %+v, want declined", ok, res)
	}
	for _, ch := range []backend.Check{a, z} {
		res, ok := b.DecideTogether(ctx, []backend.Check{ch, {Identity: "no rules"}})
		if !ok || res[0].Err != nil || !res[0].Allowed || !res[1].Allowed {
			t.Fatalf("one check with rules: ok=%v %+v, want decided and admitted (the declined call consumed nothing)", ok, res)
		}
	}
}

// A Redis user that may not run the dangerous commands (DUMP, RESTORE,
// KEYS...) decides a request together all the same: undoing a denial needs
// no command beyond those of a decision. Both checks are admitted and
// written, and a third request, over the limit, is denied whole and writes
// nothing.
func TestDecideTogetherWithoutRestorePermission(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all", "-@dangerous").Err(); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, Options{URL: srv.Addr(), Auth: "limited:pw", KeyPrefix: "together:", DisableCoalescing: true})
	one := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
	two := []limit.Rule{{Unit: limit.Hour, Limit: 2}}
	checks := []backend.Check{{Identity: "a", Rules: one, Cost: limit.Cost{N: 1}}, {Identity: "b", Rules: two, Cost: limit.Cost{N: 1}}}
	res, ok := b.DecideTogether(ctx, checks)
	if !ok || len(res) != 2 {
		t.Fatalf("DecideTogether: ok=%v %+v", ok, res)
	}
	for i, r := range res {
		if r.Err != nil || !r.Allowed {
			t.Errorf("check %d: %+v, want admitted", i, r)
		}
	}
	before := admin.Get(ctx, "together:{b}").Val()
	res, ok = b.DecideTogether(ctx, checks)
	if !ok || len(res) != 2 || res[0].Err != nil || res[0].Allowed || res[1].Err != nil || !res[1].Allowed || res[1].Outcomes[0].Remaining != 1 {
		t.Fatalf("over the limit: ok=%v %+v, want the first denied, the second admitted as a peek", ok, res)
	}
	if after := admin.Get(ctx, "together:{b}").Val(); after != before || before == "" {
		t.Errorf("b's counter %q after the denied request, %q before", after, before)
	}
}

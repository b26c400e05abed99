package redis

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// TestAnnouncing: a backend wrapped by Announcing announces, to another
// instance listening on the same Redis, each refund it accepted and each
// reset, and nothing for a decision that takes or peeks.
func TestAnnouncing(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := Options{URL: srv.Addr(), KeyPrefix: "announcing:"}
	a := newBackend(t, opts).NewAnnouncer()
	go a.Run(ctx, func(string) {}, func() {})
	b := newBackend(t, opts).NewAnnouncer()
	heard := make(chan string, 16)
	subscribed := make(chan struct{}, 4)
	go b.Run(ctx, func(id string) { heard <- id }, func() { subscribed <- struct{}{} })
	select {
	case <-subscribed:
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not subscribe within 10s")
	}
	wrapped := a.Announcing()
	rules := []limit.Rule{{Algorithm: limit.FixedWindow, Limit: 10, Unit: limit.Minute}}

	steps := []struct {
		name  string
		do    func() error
		heard string // "" when nothing must be announced
	}{
		{"a take is not announced", func() error {
			return wrapped.Decide(ctx, []backend.Check{{Identity: "taken", Rules: rules, Cost: limit.Cost{N: 1}}})[0].Err
		}, ""},
		{"a refund is announced", func() error {
			return wrapped.Decide(ctx, []backend.Check{{Identity: "refunded", Rules: rules, Cost: limit.Cost{N: 1, Refund: true}}})[0].Err
		}, "refunded"},
		{"a reset is announced", func() error { return wrapped.Reset(ctx, "reset", rules) }, "reset"},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if st.heard == "" {
			continue
		}
		select {
		case got := <-heard:
			if got != st.heard {
				t.Fatalf("%s: heard %q, want %q (a take must not be announced)", st.name, got, st.heard)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing heard within 10s", st.name)
		}
	}
}

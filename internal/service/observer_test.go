package service

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recorder is an Observer that keeps what it was told.
type recorder struct {
	mu       sync.Mutex
	outcomes []string
	requests []RequestEvent
}

func (r *recorder) Descriptor(ev DescriptorEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := ev.Outcome.String()
	if ev.Shadow {
		s += "+shadow"
	}
	if ev.Override {
		s += "+override"
	}
	if ev.Node != nil {
		s += " " + ev.Node.Path()
	}
	if ev.BackendErr != nil {
		s += " failed:" + ev.FailureMode.String()
	}
	r.outcomes = append(r.outcomes, s)
}

func (r *recorder) Request(ev RequestEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, ev)
}

func TestObserver(t *testing.T) {
	const cfg = `
domain: o
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: inf
    rate_limit: {unlimited: true}
`
	rec := &recorder{}
	h := newHarness(t, Options{Observer: rec, ShadowMode: true}, cfg)
	h.call(t, rq("o", d("a", "1"), d("s", "1"), d("b", "1"), d("inf", "1"), d("zz", "1"), override(d("b", "2"), 1, 1, 0)))
	h.call(t, rq("unknown", d("a", "1")))
	if _, err := h.svc.ShouldRateLimit(context.Background(), rq("")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty domain: %v", err)
	}
	want := []string{
		"over_limit a", "over_limit+shadow s", "ok b", "unlimited inf", "no_limit", "ok+override",
		"unknown_domain",
	}
	if !slices.Equal(rec.outcomes, want) {
		t.Fatalf("outcomes\n got %q\nwant %q", rec.outcomes, want)
	}
	if len(rec.requests) != 3 {
		t.Fatalf("%d request events, want 3", len(rec.requests))
	}
	if r := rec.requests[0]; r.Domain != "o" || r.Code != OK || !r.ShadowForced || r.Err != nil {
		t.Fatalf("first request event %+v", r)
	}
	if r := rec.requests[1]; r.Domain != "unknown" || r.Code != OK || r.ShadowForced {
		t.Fatalf("second request event %+v", r)
	}
	if r := rec.requests[2]; status.Code(r.Err) != codes.InvalidArgument {
		t.Fatalf("third request event %+v", r)
	}

	// Failures are reported with the domain's failure mode.
	rec2 := &recorder{}
	f := newHarness(t, Options{Observer: rec2, Backend: stacktest.FailingBackend{Err: stacktest.ErrRedisDown}}, failureYAML("allow"))
	f.call(t, rq("fm", d("k", "1")))
	if want := []string{"ok k failed:allow"}; !slices.Equal(rec2.outcomes, want) {
		t.Fatalf("outcomes %q, want %q", rec2.outcomes, want)
	}
}

package service

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// recordingBackend remembers the identities and rule names of the checks
// it decides.
type recordingBackend struct {
	backend.Backend
	identity string
	rules    []string
}

func (b *recordingBackend) Decide(ctx context.Context, checks []backend.Check) []backend.Result {
	b.identity, b.rules = checks[0].Identity, nil
	for _, r := range checks[0].Rules {
		b.rules = append(b.rules, r.Name)
	}
	return b.Backend.Decide(ctx, checks)
}

const lookupConfig = `domain: api
descriptors:
  - key: user
    rate_limits:
      - {name: per_user, unit: minute, requests_per_unit: 5}
    descriptors:
      - key: path
        value: /public/*
        rate_limit: {unlimited: true}
  - key: team
    value: "eng-*"
    share_threshold: true
    rate_limits:
      - {name: per_team, unit: hour, requests_per_unit: 100}
`

// TestLookupMatchesDecisions: Lookup names the node, rules and identity a
// request with the same descriptor is decided with (share_threshold
// included), touches no backend, and says so for unknown domains, no
// match, unlimited nodes and over-long values.
func TestLookupMatchesDecisions(t *testing.T) {
	rec := &recordingBackend{}
	h := newHarness(t, Options{Backend: nil}, lookupConfig)
	rec.Backend = h.mem
	h.svc = New(Options{Backend: rec, Logger: stacktest.QuietLogger()})
	h.svc.SetConfig(parseConfig(t, lookupConfig))

	for _, tc := range []struct {
		entries []descriptor.Entry
		node    string
		rules   []string
	}{
		{[]descriptor.Entry{{Key: "user", Value: "a,b"}}, "user", []string{"per_user"}},
		{[]descriptor.Entry{{Key: "team", Value: "eng-core"}}, "team_eng-*", []string{"per_team"}},
	} {
		checks := h.mem.calls.Load()
		got, err := h.svc.Lookup("api", tc.entries)
		if err != nil {
			t.Fatal(err)
		}
		if h.mem.calls.Load() != checks {
			t.Error("Lookup called the backend")
		}
		var names []string
		for _, r := range got.Rules {
			names = append(names, r.Name)
		}
		if got.Node == nil || got.Node.Path() != tc.node || !slices.Equal(names, tc.rules) {
			t.Errorf("%v: node %v rules %v, want %s %v", tc.entries, got.Node, names, tc.node, tc.rules)
		}
		var kv []string
		for _, e := range tc.entries {
			kv = append(kv, e.Key, e.Value)
		}
		if _, err := h.svc.ShouldRateLimit(context.Background(), stacktest.Request("api", stacktest.Descriptor(kv...))); err != nil {
			t.Fatal(err)
		}
		if rec.identity != got.Identity || !slices.Equal(rec.rules, names) {
			t.Errorf("%v: lookup identity %q rules %v; the request was decided with %q %v", tc.entries, got.Identity, names, rec.identity, rec.rules)
		}
	}
	// A second team value shares the first one's identity (share_threshold).
	a, _ := h.svc.Lookup("api", []descriptor.Entry{{Key: "team", Value: "eng-core"}})
	b, _ := h.svc.Lookup("api", []descriptor.Entry{{Key: "team", Value: "eng-web"}})
	if a.Identity != b.Identity {
		t.Errorf("share_threshold values have identities %q and %q, want one", a.Identity, b.Identity)
	}

	if got, err := h.svc.Lookup("api", []descriptor.Entry{{Key: "user", Value: "x"}, {Key: "path", Value: "/public/a"}}); err != nil || !got.Unlimited || len(got.Rules) != 0 {
		t.Errorf("unlimited node: %+v, %v", got, err)
	}
	if got, err := h.svc.Lookup("api", []descriptor.Entry{{Key: "other", Value: "x"}}); err != nil || got.Node != nil || len(got.Rules) != 0 {
		t.Errorf("no match: %+v, %v", got, err)
	}
	if _, err := h.svc.Lookup("nope", []descriptor.Entry{{Key: "user", Value: "x"}}); !errors.Is(err, ErrUnknownDomain) {
		t.Errorf("unknown domain: %v, want ErrUnknownDomain", err)
	}
	long := make([]byte, DefaultMaxEntryLen+1)
	if _, err := h.svc.Lookup("api", []descriptor.Entry{{Key: "user", Value: string(long)}}); err == nil {
		t.Error("an over-long value was looked up, want the request bounds' error")
	}
}

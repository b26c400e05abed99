package admin

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/hitters"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
)

const testConfig = `domain: api
descriptors:
  - key: user
    rate_limits:
      - name: per_user
        unit: minute
        requests_per_unit: 5
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// fixture is an in-process service on the memory backend, with its admin
// listener, all on one fake clock.
type fixture struct {
	clock *testenv.Clock
	svc   *service.Service
	admin *Server
	base  string
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	clock := testenv.NewClock(time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC))
	mem := stacktest.Memory(t, memory.Options{Now: clock.Now, SweepInterval: -1})
	return newFixtureOn(t, clock, mem, opts)
}

// newFixtureOn builds the fixture on backend b, which must be a
// backend.Resetter, with clock for the admin listener and its observer.
func newFixtureOn(t *testing.T, clock *testenv.Clock, b backend.Backend, opts Options) *fixture {
	t.Helper()
	return newFixtureConfig(t, clock, b, service.Options{}, testConfig, opts)
}

// newFixtureConfig is newFixtureOn with the service's options (its
// backend, observer and logger are set here) and configuration.
func newFixtureConfig(t *testing.T, clock *testenv.Clock, b backend.Backend, so service.Options, cfg string, opts Options) *fixture {
	t.Helper()
	top := hitters.New(hitters.Options{Now: clock.Now})
	obs := NewObserver(top, clock.Now)
	so.Backend, so.Observer, so.Logger = b, obs, stacktest.QuietLogger()
	svc := service.New(so)
	svc.SetConfig(stacktest.ParseConfig(t, cfg))
	opts.Addr = "127.0.0.1:0"
	opts.Looker, opts.Backend, opts.Resetters = svc, b, []backend.Resetter{b.(backend.Resetter)}
	opts.Observer, opts.Top, opts.Now = obs, top, clock.Now
	if opts.Logger == nil {
		opts.Logger = stacktest.QuietLogger()
	}
	kind := opts.Info.Backend
	if kind == "" {
		kind = "memory"
	}
	opts.Info = Info{Version: "test", Hostname: "test-host", PID: 1, Started: clock.Now(), Backend: kind,
		Listeners: map[string]string{"grpc": "127.0.0.1:8081", "http": "127.0.0.1:8080"}}
	opts.ConfigText = func() string { return svc.Config().Dump() }
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &fixture{clock: clock, svc: svc, admin: a, base: "http://" + a.Addr()}
}

// call sends one request for user (and ip when not empty).
func (f *fixture) call(t *testing.T, user string) {
	t.Helper()
	if _, err := f.svc.ShouldRateLimit(context.Background(), stacktest.Request("api", stacktest.Descriptor("user", user))); err != nil {
		t.Fatal(err)
	}
}

// traffic drives 15 minutes of traffic, 10 s at a time: everyone calls,
// and mallory calls far beyond her 5 a minute.
func (f *fixture) traffic(t *testing.T) {
	t.Helper()
	for step := range 90 {
		for i := range 3 + step%5 {
			f.call(t, "user-"+string(rune('a'+i)))
		}
		if step > 30 {
			for range 4 {
				f.call(t, "mallory")
			}
		}
		f.clock.Advance(10 * time.Second)
	}
}

// TestTopQueryChoices: by and window take their documented values (empty
// is the default) and echo what was chosen; anything else is a 400 that
// names the parameter and its values.
func TestTopQueryChoices(t *testing.T) {
	f := newFixture(t, Options{})
	tests := []struct {
		query      string
		code       int
		by, window string // echoed in the answer
		err        string
	}{
		{"", 200, "denials", "1m", ""},
		{"by=hits&window=1h", 200, "hits", "1h", ""},
		{"by=denials&window=1m", 200, "denials", "1m", ""},
		{"by=errors", 400, "", "", "by must be denials or hits"},
		{"window=1d", 400, "", "", "window must be 1m or 1h"},
	}
	for _, tt := range tests {
		code, body := testenv.HTTPGet(t, f.base+"/api/v1/top?"+tt.query)
		if code != tt.code {
			t.Errorf("%q: %d %s, want %d", tt.query, code, body, tt.code)
			continue
		}
		if tt.code != 200 {
			if !strings.Contains(body, tt.err) {
				t.Errorf("%q: %s, want it to say %q", tt.query, body, tt.err)
			}
			continue
		}
		var top struct{ By, Window string }
		if err := json.Unmarshal([]byte(body), &top); err != nil || top.By != tt.by || top.Window != tt.window {
			t.Errorf("%q: by %q window %q (%v), want %q %q", tt.query, top.By, top.Window, err, tt.by, tt.window)
		}
	}
}

// TestTopAndStatusJSON: the heavy hitters name mallory with her binding
// rule and reset; the status carries the rates, config and backend.
func TestTopAndStatusJSON(t *testing.T) {
	f := newFixture(t, Options{})
	f.traffic(t)
	code, body := testenv.HTTPGet(t, f.base+"/api/v1/top?by=denials&window=1m&domain=api")
	var top struct {
		Top []hitters.Entry
	}
	if err := json.Unmarshal([]byte(body), &top); code != 200 || err != nil || len(top.Top) == 0 {
		t.Fatalf("top: %d %v %s", code, err, body)
	}
	if e := top.Top[0]; e.Descriptor != "user=mallory" || e.Rule != "per_user" || e.Count == 0 || !e.ResetAt.After(f.clock.Now().Add(-time.Minute)) {
		t.Errorf("top denial: %+v, want user=mallory under per_user with a reset", e)
	}
	code, body = testenv.HTTPGet(t, f.base+"/api/v1/status")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("status: %d %v %s", code, err, body)
	}
	if len(st.Rates) != 1 || st.Rates[0].Domain != "api" || len(st.Rates[0].Decisions) != 89 {
		t.Fatalf("rates: %+v", st.Rates)
	}
	last := len(st.Rates[0].Decisions) - 1
	if d, den := st.Rates[0].Decisions[last], st.Rates[0].Denials[last]; d <= 0 || den <= 0 || den > d {
		t.Errorf("last point: %v decisions/s, %v denials/s", d, den)
	}
	if !st.Backend.Healthy || st.Backend.Kind != "memory" || len(st.Config.Domains) != 1 || st.Config.Version == "" {
		t.Errorf("status: %+v", st)
	}
}

// TestCountersAPI: a lookup reports used and remaining without consuming;
// a reset of one rule restores it; bad requests get 4xx with the reason.
func TestCountersAPI(t *testing.T) {
	f := newFixture(t, Options{})
	for range 6 {
		f.call(t, "bob")
	}
	tests := []struct {
		query string
		code  int
		want  string
	}{
		{"domain=api&entry=user=bob", 200, `"used": 5`},
		{"domain=api&entry=user=bob", 200, `"remaining": 0`},
		{"domain=api&entry=user=bob", 200, `"state": "5 counted in the window 2030-05-01T12:00:00Z to 2030-05-01T12:01:00Z"`},
		{"domain=api&entry=user=nobody", 200, `"used": 0`},
		{"domain=api&entry=other=x", 200, `"matched": null`},
		{"domain=nope&entry=user=bob", 404, "domain not configured"},
		{"domain=api&entry=novalue", 400, "is not key=value"},
		{"domain=api", 400, "at least one entry"},
	}
	for _, tc := range tests {
		code, body := testenv.HTTPGet(t, f.base+"/api/v1/counters?"+tc.query)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET counters?%s: %d %s\nwant %d containing %s", tc.query, code, body, tc.code, tc.want)
		}
	}
	post := func(body string) (int, string) {
		return testenv.HTTPPost(t, f.base+"/api/v1/counters/reset", body)
	}
	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{`{"domain":"api","entries":[{"key":"user","value":"bob"}],"rule":"nope"}`, 404, `no rule named \"nope\"`},
		{`{"domain":"api","entries":[{"key":"other","value":"x"}]}`, 404, "nothing to reset"},
		{`{"domain":"api","entries":[{"key":"user","value":"bob"}],"extra":1}`, 400, "unknown field"},
		{`{"domain":"api","entries":[{"key":"user","value":"bob"}],"rule":"per_user"}`, 200, `"used": 0`},
	} {
		if code, body := post(tc.body); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("POST reset %s: %d %s\nwant %d containing %s", tc.body, code, body, tc.code, tc.want)
		}
	}
}

// TestPageShowsReloadError: a rejected config edit is on the page, with
// its reason, and the config in use stays named.
func TestPageShowsReloadError(t *testing.T) {
	f := newFixture(t, Options{Reloads: func() ReloadState {
		return ReloadState{Successes: 3, Failures: 1, LastSuccess: time.Unix(100, 0), LastFailure: time.Unix(200, 0),
			LastError: errors.New(`api.yaml:7: unknown unit "fortnight"`)}
	}})
	code, body := testenv.HTTPGet(t, f.base+"/")
	for _, want := range []string{"3 loads, 1 failed", "last reload failed", "api.yaml:7: unknown unit &#34;fortnight&#34;", "the previous config stays in use"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("page (%d) lacks %q", code, want)
		}
	}
	_, status := testenv.HTTPGet(t, f.base+"/api/v1/status")
	if !strings.Contains(status, `"last_error": "api.yaml:7: unknown unit \"fortnight\""`) {
		t.Errorf("status lacks the reload error:\n%s", status)
	}
}

// TestPageShowsEstimatesAsRanges: with more distinct descriptors than the
// heavy hitters have counters, the page shows estimated counts as the
// range the true count lies in (with a note saying so), and exact counts
// as they are: mallory, counted from her first call, is exact.
func TestPageShowsEstimatesAsRanges(t *testing.T) {
	f := newFixture(t, Options{})
	for range 40 {
		f.call(t, "mallory") // 5 admitted, 35 denied
	}
	_, body := testenv.HTTPGet(t, f.base+"/")
	if strings.Contains(body, "–") || strings.Contains(body, "A range is an estimate") {
		t.Fatalf("the page shows an estimate before any:\n%s", body)
	}
	for i := range 3_000 {
		f.call(t, "user-"+strconv.Itoa(i))
	}
	_, body = testenv.HTTPGet(t, f.base+"/")
	hits := body[strings.Index(body, `id="hits"`):]
	for _, want := range []string{
		`<code>user=mallory</code></td><td class="n">40</td>`, // first by hits, exact
		`<td class="n">1–`,       // a noise descriptor, estimated
		"A range is an estimate", // the note
	} {
		if !strings.Contains(hits, want) {
			t.Errorf("the hits section lacks %q:\n%s", want, hits)
		}
	}
	if denied := body[strings.Index(body, `id="denied"`):strings.Index(body, `id="hits"`)]; !strings.Contains(denied, `<code>user=mallory</code></td><td class="n">35</td>`) {
		t.Errorf("the denied section lacks mallory's 35 denials, exact:\n%s", denied)
	}
}

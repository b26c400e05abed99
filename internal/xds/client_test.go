package xds_test

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/testkit/xdstest"
	"github.com/sluice-rl/sluice/internal/xds"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

const node = "envoy-ratelimit"

// recorder is a client's Apply and Observer: it compiles each response
// with xds.Compile and keeps what happened.
type recorder struct {
	mu        sync.Mutex
	cfg       *descriptor.Config
	version   string
	connected []bool
	accepted  []string
	rejected  []string
}

func (r *recorder) apply(version string, confs []*rlsconfv3.RateLimitConfig) error {
	c, err := xds.Compile(confs, xds.CompileOptions{})
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cfg, r.version = c, version
	return nil
}

func (r *recorder) Connected(up bool) {
	r.mu.Lock()
	r.connected = append(r.connected, up)
	r.mu.Unlock()
}
func (r *recorder) Accepted(v string) { r.mu.Lock(); r.accepted = append(r.accepted, v); r.mu.Unlock() }
func (r *recorder) Rejected(v string, _ error) {
	r.mu.Lock()
	r.rejected = append(r.rejected, v)
	r.mu.Unlock()
}

// limitOf returns the limit the config in use gives domain's key, 0 if none.
func (r *recorder) limitOf(domain, key string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.cfg.Domain(domain).Match([]descriptor.Entry{{Key: key, Value: "x"}})
	if n == nil || len(n.Rules) == 0 {
		return 0
	}
	return n.Rules[0].Limit
}

// waits records the backoff waits the client asks for and lets each pass
// at once, so no test sleeps for a backoff.
type waits struct {
	mu     sync.Mutex
	d      []time.Duration
	called chan struct{} // one value per wait
}

func newWaits() *waits { return &waits{called: make(chan struct{}, 1000)} }

func (w *waits) after(d time.Duration) <-chan time.Time {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	select {
	case w.called <- struct{}{}:
	default:
	}
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

// waitFor waits until the client has asked for n waits in all.
func (w *waits) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(xdstest.WaitTimeout)
	for {
		w.mu.Lock()
		got := len(w.d)
		w.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-w.called:
		case <-deadline:
			t.Fatalf("the client asked for %d waits, want %d", got, n)
		}
	}
}

// startClient runs a client against srv until the test ends.
func startClient(t *testing.T, s xds.Settings, rec *recorder, w *waits, logs io.Writer) {
	t.Helper()
	log := logrus.New()
	log.SetOutput(logs)
	c, err := xds.New(xds.Options{Settings: s, Apply: rec.apply, Observer: rec, Logger: log, After: w.after,
		Rand: func() float64 { return 0.5 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func settingsFor(addr string) xds.Settings {
	s := xds.DefaultSettings()
	s.ServerURL, s.NodeID = addr, node
	return s
}

// TestTypeURL is go-control-plane's name for the resource type.
func TestTypeURL(t *testing.T) {
	if xds.TypeURL != resourcev3.RateLimitConfigType {
		t.Fatalf("TypeURL %q, go-control-plane says %q", xds.TypeURL, resourcev3.RateLimitConfigType)
	}
}

// TestClientACKAndNACK pushes a config, a change, an invalid one and a
// fixed one through a real go-control-plane server: each valid version is
// applied and ACKed; the invalid one is NACKed with the error, carries the
// last good version, and leaves the config in use alone.
func TestClientACKAndNACK(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	rec, logs, w := &recorder{}, &testenv.SyncBuffer{}, newWaits()
	s := settingsFor(srv.Addr())
	s.NodeMetadata = "zone=a,team=rl=x"
	s.Headers = map[string]string{"authorization": "Bearer t"}
	startClient(t, s, rec, w, logs)

	srv.Set(t, node, "1", xdstest.PerMinute("api", "user", 10))
	srv.WaitACK(t, "1")
	if got := rec.limitOf("api", "user"); got != 10 {
		t.Fatalf("after v1: limit %d, want 10", got)
	}

	srv.Set(t, node, "2", xdstest.PerMinute("api", "user", 20))
	srv.WaitACK(t, "2")
	if got := rec.limitOf("api", "user"); got != 20 {
		t.Fatalf("after v2: limit %d, want 20", got)
	}

	bad := xdstest.PerMinute("api", "user", 30)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	srv.Set(t, node, "3", bad)
	nack := srv.WaitNACK(t, "3")
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "RateLimitConfig 'api': descriptors[0].rate_limit: rate limit has no unit") {
		t.Errorf("NACK message %q does not name the mistake", msg)
	}
	if nack.GetVersionInfo() != "2" {
		t.Errorf("NACK carries version %q, want the last good one, 2", nack.GetVersionInfo())
	}
	if got := rec.limitOf("api", "user"); got != 20 {
		t.Fatalf("after the NACK: limit %d, want 20 (the last good config)", got)
	}
	if !strings.Contains(logs.String(), "rate limit has no unit") {
		t.Errorf("the NACK's error is not in the log:\n%s", logs)
	}

	srv.Set(t, node, "4", xdstest.PerMinute("api", "user", 40))
	srv.WaitACK(t, "4")
	if got := rec.limitOf("api", "user"); got != 40 {
		t.Fatalf("after v4: limit %d, want 40", got)
	}

	rec.mu.Lock()
	accepted, rejected := append([]string(nil), rec.accepted...), append([]string(nil), rec.rejected...)
	rec.mu.Unlock()
	// The server resends a rejected version at once (go-control-plane's
	// snapshot cache sees the NACK's older version): the client answers
	// each repeat, after nackRepeatDelay, so the loop cannot spin.
	if strings.Join(accepted, ",") != "1,2,4" || len(rejected) == 0 || strings.Trim(strings.Join(rejected, ""), "3") != "" {
		t.Errorf("observer: accepted %v rejected %v, want [1 2 4] and only 3s", accepted, rejected)
	}
	w.mu.Lock()
	repeats := len(w.d)
	for _, d := range w.d {
		if d != time.Second {
			t.Errorf("the client waited %v, want only the 1s before a repeated NACK", d)
		}
	}
	w.mu.Unlock()
	if repeats != len(rejected)-1 {
		t.Errorf("%d waits for %d NACKs of one version, want one wait per repeat", repeats, len(rejected))
	}

	// What the server saw of the node and the stream.
	first := srv.Requests()[0]
	if got := first.GetNode().GetId(); got != node {
		t.Errorf("node id %q, want %q", got, node)
	}
	md := first.GetNode().GetMetadata().GetFields()
	if md["zone"].GetStringValue() != "a" || md["team"].GetStringValue() != "rl=x" {
		t.Errorf("node metadata %v, want zone=a, team=rl=x", md)
	}
	if first.GetTypeUrl() != xds.TypeURL || first.GetVersionInfo() != "" {
		t.Errorf("subscription type %q version %q", first.GetTypeUrl(), first.GetVersionInfo())
	}
	if h := srv.Headers()[0].Get("authorization"); len(h) != 1 || h[0] != "Bearer t" {
		t.Errorf("stream headers %v, want authorization: Bearer t", srv.Headers()[0])
	}
}

// TestClientReconnects stops the management server: the config in use
// stays, the client reconnects with backoff once the server is back, and
// takes the restarted server's state.
func TestClientReconnects(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	rec, w := &recorder{}, newWaits()
	s := settingsFor(srv.Addr())
	s.BackoffInitial, s.BackoffMax, s.ConnectRetryInterval = 100*time.Millisecond, 400*time.Millisecond, 50*time.Millisecond
	startClient(t, s, rec, w, io.Discard)

	srv.Set(t, node, "1", xdstest.PerMinute("api", "user", 10))
	srv.WaitACK(t, "1")

	srv.Stop()
	w.waitFor(t, 3) // three failed attempts: the backoff grows
	if got := rec.limitOf("api", "user"); got != 10 {
		t.Fatalf("while the server is gone: limit %d, want 10", got)
	}

	// A restarted server starts its versions over, with other content:
	// the client must take it (it asks for the current state, no version).
	srv.Restart(t)
	srv.Set(t, node, "1", xdstest.PerMinute("api", "user", 77))
	srv.WaitFor(t, "ACK of the restarted server's version 1", func(s *xdstest.Server) bool {
		return rec.limitOf("api", "user") == 77
	})

	w.mu.Lock()
	d := append([]time.Duration(nil), w.d...)
	w.mu.Unlock()
	// Rand is 0.5: jitter adds nothing. Waits double from 100ms up to
	// 400ms; the first failure follows a stream that worked.
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	for i := range want {
		if d[i] != want[i] {
			t.Fatalf("backoff waits %v, want them to start %v", d, want)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.connected) < 3 || !rec.connected[0] || rec.connected[1] || !rec.connected[len(rec.connected)-1] {
		t.Errorf("connected reports %v, want true, false, ..., true", rec.connected)
	}
}

// TestClientTLS connects with mutual TLS as Envoy Gateway's server wants
// it, and fails to connect when the server's name does not match the SAN.
func TestClientTLS(t *testing.T) {
	certs := xdstest.NewCerts(t, "envoy-gateway", "127.0.0.1")
	srv := xdstest.Start(t, xdstest.Options{TLS: certs.ServerTLS()})
	srv.Set(t, node, "1", xdstest.PerMinute("api", "user", 10))

	t.Run("mutual TLS", func(t *testing.T) {
		rec := &recorder{}
		s := settingsFor(srv.Addr())
		s.UseTLS, s.ClientCert, s.ClientKey, s.ServerCACert, s.ServerSAN = true, certs.Cert, certs.Key, certs.CACert, "envoy-gateway"
		startClient(t, s, rec, newWaits(), io.Discard)
		srv.WaitFor(t, "the TLS client's config", func(*xdstest.Server) bool { return rec.limitOf("api", "user") == 10 })
	})
	t.Run("wrong SAN", func(t *testing.T) {
		logs := &testenv.SyncBuffer{}
		s := settingsFor(srv.Addr())
		s.UseTLS, s.ClientCert, s.ClientKey, s.ServerCACert, s.ServerSAN = true, certs.Cert, certs.Key, certs.CACert, "someone-else"
		s.ConnectRetryInterval = 50 * time.Millisecond
		w := newWaits()
		startClient(t, s, &recorder{}, w, logs)
		w.waitFor(t, 1)
		if !strings.Contains(logs.String(), "someone-else") {
			t.Errorf("the log does not say why the connection failed:\n%s", logs)
		}
	})
}

// TestNewRefusesBadSettings: bad settings and unreadable TLS files fail
// at start, naming the problem.
func TestNewRefusesBadSettings(t *testing.T) {
	apply := func(string, []*rlsconfv3.RateLimitConfig) error { return nil }
	cases := []struct {
		name string
		edit func(*xds.Settings)
		want string
	}{
		{"no server", func(s *xds.Settings) { s.ServerURL = "" }, "server URL is empty"},
		{"bad metadata", func(s *xds.Settings) { s.NodeMetadata = "a=1,b" }, `node metadata entry "b" is not key=value`},
		{"max below initial", func(s *xds.Settings) { s.BackoffMax = time.Second }, "below the initial interval"},
		{"random factor", func(s *xds.Settings) { s.BackoffRandomFactor = 2 }, "random factor 2"},
		{"negative message size", func(s *xds.Settings) { s.MaxMsgSize = -1 }, "max message size -1"},
		{"zero retry interval", func(s *xds.Settings) { s.ConnectRetryInterval = 0 }, "connect retry interval 0s"},
		{"cert without key", func(s *xds.Settings) { s.UseTLS, s.ClientCert = true, "/x.crt" }, "both its cert and its key"},
		{"TLS files without TLS", func(s *xds.Settings) { s.ServerCACert = "/ca.crt" }, "need CONFIG_GRPC_XDS_SERVER_USE_TLS=true"},
		{"missing CA file", func(s *xds.Settings) { s.UseTLS, s.ServerCACert = true, "/nonexistent/ca.crt" }, "/nonexistent/ca.crt"},
		{"missing client pair", func(s *xds.Settings) {
			s.UseTLS, s.ClientCert, s.ClientKey = true, "/nonexistent/tls.crt", "/nonexistent/tls.key"
		}, "/nonexistent/tls.crt"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := xds.DefaultSettings()
			tc.edit(&s)
			_, err := xds.New(xds.Options{Settings: s, Apply: apply})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// largeConfig is api's user limit of 10 a minute plus 40 routes' rules of
// Envoy Gateway's shape: a response larger than 1 KiB.
func largeConfig() *rlsconfv3.RateLimitConfig {
	conf := xdstest.PerMinute("api", "user", 10)
	for i := range 40 {
		conf.Descriptors = append(conf.Descriptors, &rlsconfv3.RateLimitDescriptor{
			Key: fmt.Sprintf("httproute/default/backend-%d/rule/0/match/0/*", i), RateLimit: conf.Descriptors[0].RateLimit})
	}
	return conf
}

// TestClientMaxMsgSize: XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES bounds a response.
// A configuration larger than the bound is never applied (the stream
// fails; the configuration in use stays), and the log names the setting to
// raise, since gRPC's own error names neither it nor the 4 MiB default a
// large Envoy Gateway deployment can pass. Raised above the response, the
// same configuration is applied.
func TestClientMaxMsgSize(t *testing.T) {
	conf := largeConfig()
	for _, tc := range []struct {
		name  string
		size  int
		apply bool
	}{{"too small", 1024, false}, {"large enough", 64 << 10, true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := xdstest.Start(t, xdstest.Options{})
			rec, logs, w := &recorder{}, &testenv.SyncBuffer{}, newWaits()
			s := settingsFor(srv.Addr())
			s.MaxMsgSize = tc.size
			startClient(t, s, rec, w, logs)
			srv.Set(t, node, "1", conf)
			if tc.apply {
				srv.WaitACK(t, "1")
				if got := rec.limitOf("api", "user"); got != 10 {
					t.Fatalf("limit %d, want 10", got)
				}
				return
			}
			w.waitFor(t, 2) // two failed streams
			rec.mu.Lock()
			applied := rec.cfg != nil || len(rec.accepted) != 0
			rec.mu.Unlock()
			if applied {
				t.Fatalf("a response over the bound was applied")
			}
			if !strings.Contains(logs.String(), "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
				t.Errorf("the log does not name XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES:\n%s", logs)
			}
		})
	}
}

// TestClientRetryWarning: the warning logged before each retry says how far
// the failed stream got: none opened (no server), one that failed before
// its first response (here a response over XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES,
// named with the setting), or one that ended after the server had answered
// (the server stopped).
func TestClientRetryWarning(t *testing.T) {
	big := largeConfig()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, rec *recorder, w *waits, logs *testenv.SyncBuffer)
		want []string // in the first warning
		not  string   // not in it
	}{
		{"no server", func(t *testing.T, rec *recorder, w *waits, logs *testenv.SyncBuffer) {
			srv := xdstest.Start(t, xdstest.Options{})
			addr := srv.Addr()
			srv.Stop()
			s := settingsFor(addr)
			s.ConnectRetryInterval = 50 * time.Millisecond
			startClient(t, s, rec, w, logs)
			w.waitFor(t, 1)
		}, []string{"no stream to the management server", "open the ADS stream"}, "ended"},
		{"failed before the first response", func(t *testing.T, rec *recorder, w *waits, logs *testenv.SyncBuffer) {
			srv := xdstest.Start(t, xdstest.Options{})
			s := settingsFor(srv.Addr())
			s.MaxMsgSize = 1024
			startClient(t, s, rec, w, logs)
			srv.Set(t, node, "1", big)
			w.waitFor(t, 1)
		}, []string{"the stream to the management server failed before its first response", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"}, "no stream"},
		{"ended after answers", func(t *testing.T, rec *recorder, w *waits, logs *testenv.SyncBuffer) {
			srv := xdstest.Start(t, xdstest.Options{})
			startClient(t, settingsFor(srv.Addr()), rec, w, logs)
			srv.Set(t, node, "1", xdstest.PerMinute("api", "user", 10))
			srv.WaitACK(t, "1")
			srv.Stop()
			w.waitFor(t, 1)
		}, []string{"the stream to the management server ended", "receive"}, "no stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, logs, w := &recorder{}, &testenv.SyncBuffer{}, newWaits()
			tc.run(t, rec, w, logs)
			var first string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "level=warning") && strings.Contains(line, "retrying in") {
					first = line
					break
				}
			}
			for _, want := range tc.want {
				if !strings.Contains(first, want) {
					t.Errorf("first retry warning %q lacks %q; log:\n%s", first, want, logs)
				}
			}
			if strings.Contains(first, tc.not) {
				t.Errorf("first retry warning %q says %q", first, tc.not)
			}
		})
	}
}

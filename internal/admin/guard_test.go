package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
)

// overLimit reports whether user's next call is denied.
func (f *fixture) overLimit(t *testing.T, user string) bool {
	t.Helper()
	resp, err := f.svc.ShouldRateLimit(context.Background(), stacktest.Request("api", stacktest.Descriptor("user", user)))
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
}

// exhaust makes user's calls denied: 6 calls of the 5 a minute allowed.
func (f *fixture) exhaust(t *testing.T, user string) {
	t.Helper()
	for range 6 {
		f.call(t, user)
	}
	if !f.overLimit(t, user) {
		t.Fatalf("%s is not over the limit after 6 calls", user)
	}
}

// send makes one request to the admin listener with host as its Host and
// the given headers (name, value, ...), and returns the status and body.
func send(t *testing.T, f *fixture, method, path, host, body string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The admin listener answers only requests a tool (or its own page) sends:
// a Host that is an IP address, localhost or a configured name; no Origin
// but its own; and, on a state-changing request, application/json or the
// X-Sluice-Admin header. Everything else is refused with 403, the reason,
// and nothing done.
func TestAdminRefusesWebPages(t *testing.T) {
	f := newFixture(t, Options{Hosts: []string{"sluice-admin.example"}})
	self := strings.TrimPrefix(f.base, "http://")
	_, port, _ := net.SplitHostPort(self)
	reset := `{"domain":"api","entries":[{"key":"user","value":"mallory"}]}`
	for _, tc := range []struct {
		name, method, path, host, body string
		headers                        []string
		refused                        string // "" when the request is served
	}{
		{"GET by IP", "GET", "/rlconfig", self, "", nil, ""},
		{"GET by localhost, another port (port-forward)", "GET", "/rlconfig", "localhost:8080", "", nil, ""},
		{"GET by IPv6", "GET", "/rlconfig", "[::1]:" + port, "", nil, ""},
		{"GET by a configured name", "GET", "/rlconfig", "Sluice-Admin.example:" + port, "", nil, ""},
		{"GET by a rebinding name", "GET", "/rlconfig", "rebind.attacker.example:" + port, "", nil, "is not an address of this listener"},
		{"pprof by a rebinding name", "GET", "/debug/pprof/", "attacker.example", "", nil, "SLUICE_ADMIN_HOSTS"},
		{"GET from its own origin", "GET", "/api/v1/status", self, "", []string{"Origin", f.base}, ""},
		{"GET from another origin", "GET", "/api/v1/status", self, "", []string{"Origin", "http://127.0.0.1:9999"}, "is not this listener's"},
		{"POST from another origin, JSON", "POST", "/api/v1/counters/reset", self, reset,
			[]string{"Origin", "http://127.0.0.1:9999", "Content-Type", "application/json"}, "is not this listener's"},
		{"POST text/plain", "POST", "/api/v1/counters/reset", self, reset, []string{"Content-Type", "text/plain"}, "needs Content-Type: application/json"},
		{"POST form", "POST", "/api/v1/counters/reset", self, reset, []string{"Content-Type", "application/x-www-form-urlencoded"}, "needs Content-Type"},
		{"POST without a type", "POST", "/api/v1/counters/reset", self, reset, nil, "needs Content-Type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.exhaust(t, "mallory")
			before := f.admin.Refused()
			code, body := send(t, f, tc.method, tc.path, tc.host, tc.body, tc.headers...)
			if tc.refused == "" {
				if code != http.StatusOK {
					t.Fatalf("%s %s (Host %s): %d %s, want 200", tc.method, tc.path, tc.host, code, body)
				}
				return
			}
			if code != http.StatusForbidden || !strings.Contains(body, tc.refused) {
				t.Fatalf("%s %s (Host %s): %d %q, want 403 saying %q", tc.method, tc.path, tc.host, code, body, tc.refused)
			}
			if got := f.admin.Refused() - before; got != 1 {
				t.Errorf("refusals counted: %d, want 1", got)
			}
			if !f.overLimit(t, "mallory") {
				t.Errorf("mallory's counters were reset by a refused request")
			}
		})
	}
	// A tool's reset, with JSON or the header, is served and resets.
	for _, h := range [][]string{{"Content-Type", "application/json; charset=utf-8"}, {AdminHeader, "1", "Content-Type", "text/plain"}} {
		f.exhaust(t, "mallory")
		if code, body := send(t, f, "POST", "/api/v1/counters/reset", self, reset, h...); code != http.StatusOK {
			t.Fatalf("reset with %v: %d %s", h, code, body)
		}
		if f.overLimit(t, "mallory") {
			t.Fatalf("reset with %v: mallory still over the limit", h)
		}
	}
}

// In headless Chromium, a page from another loopback origin sends the
// reset a web page can send without asking (fetch, mode no-cors, a
// text/plain body): it reached the listener, which refused it, and
// mallory's counters stand. A page under a name resolving to the
// listener's address (DNS rebinding: same-origin with the listener)
// reads only the refusal, not the configuration.
func TestAdminCrossSiteInChromium(t *testing.T) {
	bin := chromium(t)
	f := newFixture(t, Options{})
	f.exhaust(t, "mallory")

	// The attacker's page, on another loopback address and port.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	page := `<!doctype html><html><body><p id="state">loading</p><script>
fetch(` + "`" + f.base + `/api/v1/counters/reset` + "`" + `, {method: "POST", mode: "no-cors",
  headers: {"Content-Type": "text/plain"},
  body: JSON.stringify({domain: "api", entries: [{key: "user", value: "mallory"}]})})
  .then(() => { document.getElementById("state").textContent = "request sent"; },
        (e) => { document.getElementById("state").textContent = "request failed: " + e; });
</script></body></html>`
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	before := f.admin.Refused()
	dom := headless(t, bin, "http://"+ln.Addr().String()+"/", "--dump-dom", "--virtual-time-budget=10000")
	if !strings.Contains(dom, "request sent") {
		t.Fatalf("the page's request did not complete; its DOM:\n%s", dom)
	}
	if got := f.admin.Refused() - before; got != 1 {
		t.Errorf("the listener refused %d requests, want the page's 1", got)
	}
	if !f.overLimit(t, "mallory") {
		t.Errorf("the cross-site page reset mallory's counters")
	}

	// DNS rebinding: the browser resolves the attacker's name to the
	// listener's address; the page is same-origin with the listener.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(f.base, "http://"))
	if dom := headless(t, bin, f.base+"/rlconfig", "--dump-dom"); !strings.Contains(dom, "api.user:") {
		t.Fatalf("the configuration by the listener's address reads:\n%s", dom)
	}
	before = f.admin.Refused()
	dom = headless(t, bin, "http://rebind.attacker.test:"+port+"/rlconfig", "--dump-dom",
		"--host-resolver-rules=MAP rebind.attacker.test 127.0.0.1")
	if !strings.Contains(dom, "is not an address of this listener") || strings.Contains(dom, "api.user:") {
		t.Errorf("under a rebinding name the page read:\n%s", dom)
	}
	if got := f.admin.Refused() - before; got < 1 {
		t.Errorf("the listener refused %d requests under the rebinding name, want at least 1", got)
	}
}

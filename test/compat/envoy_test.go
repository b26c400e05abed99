package compat

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// The incumbent's end-to-end scripts (integration-test/scripts) drive Envoy
// (examples/envoy/proxy.yaml) in front of the service, with the example
// config (testdata/example/config.yaml) and RESPONSE_DYNAMIC_METADATA on.
// Here the descriptors each route's rate_limits produce are sent as Envoy
// sends them: a rate_limits entry whose header is missing produces no
// descriptor; hits_addend 0 on the request path and a debit of 1 on stream
// done for the token-quota routes. A request is refused (429) when the
// overall code is OVER_LIMIT.

// exampleEnv is the incumbent's integration-test environment for the
// service.
var exampleEnv = map[string]string{"RUNTIME_WATCH_ROOT": "false", "RESPONSE_DYNAMIC_METADATA": "true"}

// headers are the request headers a script sends.
type headers map[string]string

// route builds the descriptors of a route's rate_limits: each action list
// is descriptor keys read from headers of the same name; a list with a
// missing header produces no descriptor, as in Envoy.
func route(h headers, actions ...[]string) []desc {
	var out []desc
	for _, keys := range actions {
		var kv []string
		for _, k := range keys {
			v, ok := h[k]
			if !ok {
				kv = nil
				break
			}
			kv = append(kv, k, v)
		}
		if kv != nil {
			out = append(out, d(kv...))
		}
	}
	return out
}

// The routes of examples/envoy/proxy.yaml that read headers.
func twoheader(h headers) []desc {
	return route(h, []string{"foo", "bar"}, []string{"foo", "baz"})
}
func fourheader(h headers) []desc {
	return route(h, []string{"foo", "bar"}, []string{"source_cluster", "destination_cluster"})
}
func fiveheader(h headers) []desc {
	return route(h, []string{"foo", "bar"}, []string{"source_cluster", "destination_cluster"}, []string{"category"})
}

// passes reports whether Envoy lets a request with descriptors ds through.
func (s *server) passes(t *testing.T, ds []desc) bool {
	t.Helper()
	return s.ask(t, rq("rl", ds...)).GetOverallCode() == ok
}

// verdicts renders pass/refuse answers as the scripts see them.
func verdicts(passed ...bool) string {
	out := make([]string, len(passed))
	for i, p := range passed {
		out[i] = "429"
		if p {
			out[i] = "200"
		}
	}
	return strings.Join(out, " ")
}

// onExample runs body once per core backend, in parallel, against a sluice
// serving the incumbent's example config, at least 10 s before the next
// minute edge (the example's limits are per minute).
func onExample(t *testing.T, body func(t *testing.T, s *server)) {
	for _, v := range core {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, v, exampleEnv, "example/config.yaml")
			sluicetest.AwayFromEdge(t, time.Minute, 0, 10*time.Second)
			body(t, s)
		})
	}
}

// TestEnvoyExample replays the incumbent's scripts against its example
// config on every core backend.
func TestEnvoyExample(t *testing.T) {
	onExample(t, func(t *testing.T, s *server) {
		// simple-get.sh: a shadowed 3/min node answers OK.
		resp := s.ask(t, rq("rl", twoheader(headers{"foo": "test", "baz": "shady"})...))
		expect(t, "simple-get", answerOf(resp), ans(ok, limited(ok, 3, "MINUTE", 2)))

		// trigger-ratelimit.sh: (foo: *, baz: not-so-shady) is 3/min.
		h := headers{"foo": "pelle", "baz": "not-so-shady"}
		var got []bool
		for range 5 {
			got = append(got, s.passes(t, twoheader(h)))
		}
		expect(t, "trigger-ratelimit", verdicts(got...), verdicts(true, true, true, false, false))

		// trigger-shadow-mode-key.sh: (foo: *, baz: shady) is 3/min in
		// shadow mode: every request passes, the sixth with 0 left.
		h = headers{"foo": "pelle", "baz": "shady"}
		got = nil
		for range 5 {
			got = append(got, s.passes(t, twoheader(h)))
		}
		expect(t, "trigger-shadow-mode-key", verdicts(got...), verdicts(true, true, true, true, true))
		resp = s.ask(t, rq("rl", twoheader(h)...))
		expect(t, "trigger-shadow-mode-key, sixth", answerOf(resp), ans(ok, limited(ok, 3, "MINUTE", 0)))

		// value-included-in-stats-key-when-unspecified.sh: (unspec: *) is
		// 2/min with detailed_metric; the over-limit count is kept for
		// the value.
		got = nil
		for range 3 {
			got = append(got, s.passes(t, route(headers{"unspec": "unspecified_value"}, []string{"unspec"})))
		}
		expect(t, "unspec", verdicts(got...), verdicts(true, true, false))
		n, _ := metric(t, s, `sluice_descriptor_over_limit_total{descriptor="unspec_unspecified_value",domain="rl"}`)
		expect(t, "over-limit count of unspec_unspecified_value", n, 1)
	})
}

// TestEnvoyReplaces replays replaces.sh: a named limit replaced by another
// descriptor of the same request is not applied; it still applies to
// requests without the replacing descriptor.
func TestEnvoyReplaces(t *testing.T) {
	onExample(t, func(t *testing.T, s *server) {
		banned := headers{"foo": "bkthomps", "bar": "banned"}
		withDest := func(h headers, dest string, more ...string) headers {
			out := headers{"source_cluster": "proxy", "destination_cluster": dest}
			for k, v := range h {
				out[k] = v
			}
			for i := 0; i+1 < len(more); i += 2 {
				out[more[i]] = more[i+1]
			}
			return out
		}
		mine := headers{"foo": "my_foo", "bar": "bkthomps"}
		steps := []struct {
			what string
			ds   []desc
			pass bool
		}{
			{"banned alone", twoheader(banned), false},
			{"banned with mock", fourheader(withDest(banned, "mock")), false},
			{"banned replaced by override 1", fourheader(withDest(banned, "override")), true},
			{"banned replaced by override 2", fourheader(withDest(banned, "override")), true},
			{"override over its 2/min", fourheader(withDest(banned, "override")), false},
			{"bkthomps replaced 1", fourheader(withDest(mine, "bkthomps")), true},
			{"bkthomps replaced 2", fourheader(withDest(mine, "bkthomps")), true},
			{"bkthomps replacement over its 2/min", fourheader(withDest(mine, "bkthomps")), false},
			{"bkthomps not replaced 1", fourheader(withDest(mine, "not_bkthomps")), true},
			{"bkthomps not replaced, over its 1/min", fourheader(withDest(mine, "not_bkthomps")), false},
			{"bkthomps replaced again, still over", fourheader(withDest(mine, "bkthomps")), false},
			{"account replaces two 1", fiveheader(withDest(mine, "fake", "category", "account")), true},
			{"account replaces two 2", fiveheader(withDest(mine, "fake", "category", "account")), true},
			{"account replaces two 3", fiveheader(withDest(mine, "fake", "category", "account")), true},
			{"account replaces two 4", fiveheader(withDest(mine, "fake", "category", "account")), true},
			{"account over its 4/min", fiveheader(withDest(mine, "fake", "category", "account")), false},
			{"foo_2 bkthomps 1", twoheader(headers{"foo": "foo_2", "bar": "bkthomps"}), true},
			{"foo_2 bkthomps over its 1/min", twoheader(headers{"foo": "foo_2", "bar": "bkthomps"}), false},
			{"fake not replaced 1", fourheader(withDest(headers{"foo": "foo_3", "bar": "bar_3"}, "fake")), true},
			{"fake not replaced 2", fourheader(withDest(headers{"foo": "foo_3", "bar": "bar_3"}, "fake")), true},
			{"fake over its 2/min", fourheader(withDest(headers{"foo": "foo_3", "bar": "bar_3"}, "fake")), false},
			{"account still over", fiveheader(withDest(mine, "fake", "category", "account")), false},
		}
		for i, step := range steps {
			expect(t, fmt.Sprintf("replaces step %d (%s)", i+1, step.what), verdicts(s.passes(t, step.ds)), verdicts(step.pass))
		}
	})
}

// TestEnvoyQuota replays quota.sh: two quota_mode descriptors (1/min and
// 2/min) in each request; a request is refused only when both are over.
func TestEnvoyQuota(t *testing.T) {
	onExample(t, func(t *testing.T, s *server) {
		quota := []desc{d("service", "service_1"), d("service", "service_2")}
		resp := s.ask(t, rq("rl", quota...))
		expect(t, "quota 1", answerOf(resp), ans(ok, limited(ok, 1, "MINUTE", 0), limited(ok, 2, "MINUTE", 1)))
		quota = []desc{d("service", "service_1"), d("service", "service_2")}
		resp = s.ask(t, rq("rl", quota...))
		expect(t, "quota 2", answerOf(resp), ans(ok, limited(over, 1, "MINUTE", 0), limited(ok, 2, "MINUTE", 0)))
		quota = []desc{d("service", "service_1"), d("service", "service_2")}
		resp = s.ask(t, rq("rl", quota...))
		expect(t, "quota 3", answerOf(resp), ans(over, limited(over, 1, "MINUTE", 0), limited(over, 2, "MINUTE", 0)))
	})
}

// TestEnvoyTokenQuota replays token-quota.sh: the request path checks
// (service: service_2) with hits_addend 0, the response path debits 1.
// service_2 has 2/min, so three requests pass and the fourth is refused:
// the incumbent charges every debit. sluice charges a debit, the
// descriptor's own hits_addend, whether or not it fits: on quota_mode nodes
// (the example's) and, with no setting, on every other node too. Only
// SLUICE_CHARGE_OVER_LIMIT=false (or charge_over_limit: false) leaves a
// denied debit uncharged, and the flow never binds.
func TestEnvoyTokenQuota(t *testing.T) {
	cases := []struct {
		name   string
		env    map[string]string
		config string
		alts   []alt[string]
	}{
		{"quota_mode", exampleEnv, "example/config.yaml", nil},
		{"no setting", map[string]string{"RUNTIME_WATCH_ROOT": "false"}, "example/no_quota_mode.yaml", nil},
		{"SLUICE_CHARGE_OVER_LIMIT", with(with(map[string]string{}, "RUNTIME_WATCH_ROOT", "false"), "SLUICE_CHARGE_OVER_LIMIT", "true"),
			"example/no_quota_mode.yaml", nil},
		{"SLUICE_CHARGE_OVER_LIMIT=false", with(with(map[string]string{}, "RUNTIME_WATCH_ROOT", "false"), "SLUICE_CHARGE_OVER_LIMIT", "false"),
			"example/no_quota_mode.yaml", []alt[string]{because(devDeniedNothing, verdicts(true, true, true, true))}},
	}
	for _, v := range core {
		for _, c := range cases {
			t.Run(v.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				s := start(t, v, c.env, c.config)
				sluicetest.AwayFromEdge(t, time.Minute, 0, 10*time.Second)
				var got []bool
				for range 4 {
					pass := s.passes(t, []desc{d("service", "service_2").hits(0)})
					got = append(got, pass)
					if pass {
						s.ask(t, rq("rl", d("service", "service_2").hits(1))) // on stream done
					}
				}
				expect(t, "token-quota", verdicts(got...), verdicts(true, true, true, false), c.alts...)
			})
		}
	}
}

// TestEnvoyMultiserviceTokenQuota replays multiservice-tokenquota.sh: the
// request path checks service_1 (1/min) and service_2 (2/min) with
// hits_addend 0; Envoy routes to the service named by the metadata of the
// first descriptor that passed, and debits 1 from that service on stream
// done. Requests go to service_1 twice, then service_2 three times, then
// are refused.
func TestEnvoyMultiserviceTokenQuota(t *testing.T) {
	onExample(t, func(t *testing.T, s *server) {
		var served []string
		for range 6 {
			resp := s.ask(t, rq("rl", d("service", "service_1").hits(0), d("service", "service_2").hits(0)))
			if resp.GetOverallCode() != ok {
				served = append(served, "429")
				continue
			}
			name := serviceWithQuota(resp)
			served = append(served, name)
			s.ask(t, rq("rl", d("service", name).hits(1))) // on stream done
		}
		expect(t, "multiservice-tokenquota", strings.Join(served, " "),
			"service_1 service_1 service_2 service_2 service_2 429")
	})
}

// serviceWithQuota reads metadata.service_with_quota.name from the
// response's dynamic metadata, as examples/envoy/proxy.yaml's header
// mutation does.
func serviceWithQuota(resp *rlsv3.RateLimitResponse) string {
	md := resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue()
	return md.GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
}

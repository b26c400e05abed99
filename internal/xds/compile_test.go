package xds

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// Shorthands for building resources.
type (
	rlc    = rlsconfv3.RateLimitConfig
	rld    = rlsconfv3.RateLimitDescriptor
	policy = rlsconfv3.RateLimitPolicy
)

// meta builds descriptor metadata.
func meta(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	return stacktest.Struct(t, m)
}

// render writes every node of c with everything that decides requests and
// metrics (not where it was written), so two configs compare equal when
// they mean the same.
func render(c *descriptor.Config) string {
	var b strings.Builder
	for _, name := range c.Domains() {
		d := c.Domain(name)
		fmt.Fprintf(&b, "domain %s failure_mode=%s\n", d.Name, d.FailureMode)
		d.Walk(func(n *descriptor.Node) {
			charge := "unset"
			if n.ChargeOverLimit != nil {
				charge = fmt.Sprint(*n.ChargeOverLimit)
			}
			fmt.Fprintf(&b, "  %s depth=%d wildcard=%v unlimited=%v replaces=%v shadow=%v quota=%v detailed=%v v2m=%v share=%v charge=%s metadata=%v\n",
				n.Path(), n.Depth, n.Wildcard, n.Unlimited, n.Replaces, n.ShadowMode, n.QuotaMode, n.DetailedMetric,
				n.ValueToMetric, n.ShareThreshold, charge, n.Metadata)
			for _, r := range n.Rules {
				fmt.Fprintf(&b, "    rule %s name=%q\n", r.String(), r.Name)
			}
		})
	}
	return b.String()
}

// TestCompileMeansWhatYAMLMeans compiles resources and the YAML that says
// the same, and wants the same match trees: one path, one meaning.
func TestCompileMeansWhatYAMLMeans(t *testing.T) {
	cases := []struct {
		name  string
		confs func(t *testing.T) []*rlc
		yaml  string
	}{{
		name: "the incumbent's fields",
		confs: func(t *testing.T) []*rlc {
			return []*rlc{{Name: "api-config", Domain: "api", Descriptors: []*rld{
				{Key: "user", RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 10, Name: "per-user"},
					DetailedMetric: true, Metadata: meta(t, map[string]any{"team": "a", "n": 2.0})},
				{Key: "user", Value: "admin", RateLimit: &policy{Unlimited: true}},
				{Key: "path", Value: "/v1/*", QuotaMode: true, RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1000,
					Replaces: []*rlsconfv3.RateLimitReplace{{Name: "per-user"}}}},
				{Key: "org", Descriptors: []*rld{
					{Key: "plan", Value: "free", ShadowMode: true, RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_DAY, RequestsPerUnit: 5}},
					{Key: "plan", Value: "w", RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_WEEK, RequestsPerUnit: 6}},
					{Key: "plan", Value: "m", RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_MONTH, RequestsPerUnit: 7}},
					{Key: "plan", Value: "y", RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_YEAR, RequestsPerUnit: 8}},
					{Key: "plan", Value: "s", RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 9}},
				}},
			}}}
		},
		yaml: `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, name: per-user}
    detailed_metric: true
    metadata: {team: a, n: 2.0}
  - key: user
    value: admin
    rate_limit: {unlimited: true}
  - key: path
    value: /v1/*
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1000, replaces: [{name: per-user}]}
  - key: org
    descriptors:
      - {key: plan, value: free, shadow_mode: true, rate_limit: {unit: day, requests_per_unit: 5}}
      - {key: plan, value: w, rate_limit: {unit: week, requests_per_unit: 6}}
      - {key: plan, value: m, rate_limit: {unit: month, requests_per_unit: 7}}
      - {key: plan, value: y, rate_limit: {unit: year, requests_per_unit: 8}}
      - {key: plan, value: s, rate_limit: {unit: second, requests_per_unit: 9}}
`,
	}, {
		name: "sluice's extensions in metadata",
		confs: func(t *testing.T) []*rlc {
			return []*rlc{{Domain: "llm", Descriptors: []*rld{
				{Key: "user", Metadata: meta(t, map[string]any{"owner": "x", ExtensionKey: map[string]any{
					"value_to_metric": true,
					"rate_limits": []any{
						map[string]any{"name": "burst", "algorithm": "token_bucket", "unit": "second", "requests_per_unit": 10.0, "burst": 30.0},
						map[string]any{"unit": "day", "requests_per_unit": 10000.0, "time_zone": "Asia/Shanghai"},
						map[string]any{"unit": "minute", "unit_multiplier": 5.0, "requests_per_unit": 100.0, "replaces": []any{map[string]any{"name": "other"}}},
					},
				}})},
				{Key: "model", Value: "gpt-*", Metadata: meta(t, map[string]any{ExtensionKey: map[string]any{"share_threshold": true}}),
					RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 3}},
				{Key: "tokens", Metadata: meta(t, map[string]any{ExtensionKey: map[string]any{"charge_over_limit": true}}),
					RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 10000}},
				{Key: "quota", QuotaMode: true, Metadata: meta(t, map[string]any{ExtensionKey: map[string]any{"charge_over_limit": false}}),
					RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 5}},
			}}}
		},
		yaml: `
domain: llm
descriptors:
  - key: user
    value_to_metric: true
    metadata: {owner: x}
    rate_limits:
      - {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 30}
      - {unit: day, requests_per_unit: 10000, time_zone: Asia/Shanghai}
      - {unit: minute, unit_multiplier: 5, requests_per_unit: 100, replaces: [{name: other}]}
  - key: model
    value: gpt-*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tokens
    charge_over_limit: true
    rate_limit: {unit: hour, requests_per_unit: 10000}
  - key: quota
    quota_mode: true
    charge_over_limit: false
    rate_limit: {unit: hour, requests_per_unit: 5}
`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compile(tc.confs(t), CompileOptions{})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			domains, err := descriptor.Parse("test.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want, err := descriptor.NewConfig(domains...)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := render(got), render(want); g != w {
				t.Errorf("xDS and YAML differ\nxDS:\n%s\nYAML:\n%s", g, w)
			}
		})
	}
}

// TestCompileErrors wants every mistake named by its resource and field
// path, and no Config.
func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name  string
		confs func(t *testing.T) []*rlc
		opts  CompileOptions
		want  []string
	}{
		{"no unit", func(*testing.T) []*rlc {
			return []*rlc{{Name: "r", Domain: "d", Descriptors: []*rld{{Key: "k", RateLimit: &policy{RequestsPerUnit: 1}}}}}
		}, CompileOptions{}, []string{"RateLimitConfig 'r': descriptors[0].rate_limit: rate limit has no unit"}},
		{"unlimited with a unit", func(*testing.T) []*rlc {
			return []*rlc{{Name: "r", Domain: "d", Descriptors: []*rld{{Key: "k", RateLimit: &policy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_SECOND}}}}}
		}, CompileOptions{}, []string{"RateLimitConfig 'r': descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"}},
		{"unit number not in the enum", func(*testing.T) []*rlc {
			return []*rlc{{Name: "r", Domain: "d", Descriptors: []*rld{{Key: "k", RateLimit: &policy{Unit: 42, RequestsPerUnit: 1}}}}}
		}, CompileOptions{}, []string{"descriptors[0].rate_limit.unit: invalid rate limit unit '42'"}},
		{"fields this build does not know", func(*testing.T) []*rlc {
			c := &rlc{Name: "r", Domain: "d", Descriptors: []*rld{{Key: "k", Descriptors: []*rld{{Key: "n",
				RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1, Replaces: []*rlsconfv3.RateLimitReplace{{Name: "x"}}}}}}}}
			WithUnknown(c, 40)
			WithUnknown(c.Descriptors[0].Descriptors[0], 41, 42)
			WithUnknown(c.Descriptors[0].Descriptors[0].RateLimit, 43)
			WithUnknown(c.Descriptors[0].Descriptors[0].RateLimit.Replaces[0], 44)
			return []*rlc{c}
		}, CompileOptions{}, []string{
			"RateLimitConfig 'r': fields 40 unknown to this build",
			"RateLimitConfig 'r': descriptors[0].descriptors[0]: fields 41, 42 unknown to this build",
			"RateLimitConfig 'r': descriptors[0].descriptors[0].rate_limit: fields 43 unknown to this build",
			"RateLimitConfig 'r': descriptors[0].descriptors[0].rate_limit.replaces[0]: fields 44 unknown to this build",
		}},
		{"empty key, nested", func(*testing.T) []*rlc {
			return []*rlc{{Domain: "d", Descriptors: []*rld{{Key: "a", Descriptors: []*rld{{Key: ""}}}}}}
		}, CompileOptions{}, []string{"RateLimitConfig #0: descriptors[0].descriptors[0].key: descriptor has empty key"}},
		{"empty domain", func(*testing.T) []*rlc {
			return []*rlc{{Name: "r"}}
		}, CompileOptions{}, []string{"RateLimitConfig 'r': domain: config file cannot have empty domain"}},
		{"duplicate composite key", func(*testing.T) []*rlc {
			return []*rlc{{Name: "r", Domain: "d", Descriptors: []*rld{{Key: "k", Value: "v"}, {Key: "k", Value: "v"}}}}
		}, CompileOptions{}, []string{"descriptors[1]: duplicate descriptor composite key 'd.k_v'"}},
		{"duplicate domain", func(*testing.T) []*rlc {
			return []*rlc{{Name: "a", Domain: "d"}, {Name: "b", Domain: "d"}}
		}, CompileOptions{}, []string{"RateLimitConfig 'b': domain: duplicate domain 'd' (first in RateLimitConfig 'a')"}},
		{"merged domains still collide on a key", func(*testing.T) []*rlc {
			return []*rlc{{Name: "a", Domain: "d", Descriptors: []*rld{{Key: "k"}}}, {Name: "b", Domain: "d", Descriptors: []*rld{{Key: "k"}}}}
		}, CompileOptions{MergeDomains: true}, []string{"RateLimitConfig 'b': descriptors[0]: duplicate descriptor composite key 'd.k'"}},
		{"several errors, all reported", func(*testing.T) []*rlc {
			return []*rlc{{Name: "r", Domain: "d", Descriptors: []*rld{
				{Key: "a", RateLimit: &policy{RequestsPerUnit: 1}},
				{Key: "b", RateLimit: &policy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_DAY}},
			}}}
		}, CompileOptions{}, []string{"descriptors[0].rate_limit: rate limit has no unit", "descriptors[1].rate_limit.unit: should not specify"}},
		{"extension beside rate_limit", func(t *testing.T) []*rlc {
			return []*rlc{{Name: "r", Domain: "d", Descriptors: []*rld{{Key: "k", RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1},
				Metadata: meta(t, map[string]any{ExtensionKey: map[string]any{"rate_limits": []any{map[string]any{"unit": "day", "requests_per_unit": 1.0}}}})}}}}
		}, CompileOptions{}, []string{"descriptors[0].metadata.sluice.rate_limits: rate_limit (descriptors[0].rate_limit) and sluice.rate_limits cannot both be set"}},
		{"extension mistakes", func(t *testing.T) []*rlc {
			return []*rlc{{Name: "r", Domain: "d", Descriptors: []*rld{
				{Key: "a", Metadata: meta(t, map[string]any{ExtensionKey: "yes"})},
				{Key: "b", Metadata: meta(t, map[string]any{ExtensionKey: map[string]any{"rate_limit": 1.0}})},
				{Key: "c", Metadata: meta(t, map[string]any{ExtensionKey: map[string]any{"rate_limits": []any{
					map[string]any{"unit": "second", "requests_per_unit": 1.5},
					map[string]any{"unit": "second", "requests_per_unit": 1.0, "algorithm": "token_bucket", "burst": -1.0},
					map[string]any{"unit": "day", "requests_per_unit": 1.0, "time_zone": "Mars/Olympus"},
					map[string]any{"unit": "hour", "requests_per_unit": 1.0, "algorithm": "magic"},
				}}})},
			}}}
		}, CompileOptions{}, []string{
			`descriptors[0].metadata.sluice: must be a map, got "yes"`,
			"descriptors[1].metadata.sluice.rate_limit: unknown key 'rate_limit'",
			"descriptors[2].metadata.sluice.rate_limits[0].requests_per_unit: requests_per_unit must be a whole number",
			"descriptors[2].metadata.sluice.rate_limits[1].burst: burst must be a whole number",
			"descriptors[2].metadata.sluice.rate_limits[2].time_zone: unknown time_zone 'Mars/Olympus'",
			"descriptors[2].metadata.sluice.rate_limits[3].algorithm:",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Compile(tc.confs(t), tc.opts)
			if err == nil {
				t.Fatalf("Compile: no error, config:\n%s", c.Dump())
			}
			if c != nil {
				t.Error("Compile returned a Config with its error")
			}
			if _, ok := err.(descriptor.ErrorList); !ok {
				t.Errorf("error is %T, want descriptor.ErrorList", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// TestCompileMergeDomains joins two resources of one domain when asked.
func TestCompileMergeDomains(t *testing.T) {
	confs := []*rlc{
		{Name: "a", Domain: "d", Descriptors: []*rld{{Key: "x", RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}},
		{Name: "b", Domain: "d", Descriptors: []*rld{{Key: "y", RateLimit: &policy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 2}}}},
	}
	c, err := Compile(confs, CompileOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"x", "y"} {
		if n := c.Domain("d").Match([]descriptor.Entry{{Key: key, Value: "v"}}); n == nil {
			t.Errorf("merged domain does not match %s", key)
		}
	}
	if got := c.Domains(); !slices.Equal(got, []string{"d"}) {
		t.Errorf("domains %v", got)
	}
}

// TestCompileEmpty: no resources is a valid, empty configuration (the
// management server has no limits for this node), as for envoyproxy/ratelimit.
func TestCompileEmpty(t *testing.T) {
	c, err := Compile(nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c == nil || len(c.Domains()) != 0 {
		t.Fatalf("want an empty Config, got %v", c)
	}
}

// TestCompileReadsEveryField lists every field of the resource's messages
// and wants each in the set Compile maps. A go-control-plane update that
// adds a field (Envoy Gateway sends what its version of the proto has)
// fails here until Compile reads the field or refuses it on purpose.
func TestCompileReadsEveryField(t *testing.T) {
	read := map[string][]string{ // message: the fields Compile maps, in proto order
		"RateLimitConfig":     {"name", "domain", "descriptors"},
		"RateLimitDescriptor": {"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "quota_mode", "metadata"},
		"RateLimitPolicy":     {"unit", "requests_per_unit", "unlimited", "name", "replaces"},
		"RateLimitReplace":    {"name"},
	}
	for _, m := range []proto.Message{&rlc{}, &rld{}, &policy{}, &rlsconfv3.RateLimitReplace{}} {
		md := m.ProtoReflect().Descriptor()
		var got []string
		for i := range md.Fields().Len() {
			got = append(got, string(md.Fields().Get(i).Name()))
		}
		if want := read[string(md.Name())]; !slices.Equal(got, want) {
			t.Errorf("%s has fields %v; Compile maps %v", md.FullName(), got, want)
		}
	}
	// Every unit of the enum compiles (WEEK is the newest; Envoy Gateway
	// sends it for its unit Week).
	units := rlsconfv3.RateLimitUnit(0).Descriptor().Values()
	for i := range units.Len() {
		u := rlsconfv3.RateLimitUnit(units.Get(i).Number())
		if u == rlsconfv3.RateLimitUnit_UNKNOWN {
			continue
		}
		conf := &rlc{Name: "r", Domain: "d", Descriptors: []*rld{{Key: "k", RateLimit: &policy{Unit: u, RequestsPerUnit: 1}}}}
		if _, err := Compile([]*rlc{conf}, CompileOptions{}); err != nil {
			t.Errorf("unit %v: %v", u, err)
		}
	}
}

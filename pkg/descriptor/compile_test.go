package descriptor

import (
	"errors"
	"reflect"
	"testing"

	"github.com/sluice-rl/sluice/pkg/limit"
)

func ptr[T any](v T) *T { return &v }

// TestCompileWithoutYAML: a config built as plain structs, as a non-YAML
// source (xDS) builds it, compiles into the same tree as its YAML twin.
func TestCompileWithoutYAML(t *testing.T) {
	spec := DomainSpec{
		Name: "api", FailureMode: "allow",
		At: Pos{Source: "RateLimitConfig api"},
		Descriptors: []DescriptorSpec{{
			Key: "user",
			RateLimits: []RuleSpec{
				{Name: "burst", Algorithm: "token_bucket", Unit: "second", RequestsPerUnit: 10, Burst: ptr[uint32](30)},
				{Unit: "day", RequestsPerUnit: 1000, TimeZone: ptr("UTC")},
			},
			Descriptors: []DescriptorSpec{{Key: "path", Value: "/a*", ShareThreshold: true,
				RateLimits: []RuleSpec{{Unlimited: true, Replaces: []ReplaceSpec{{Name: "burst"}}}}}},
		}},
	}
	d, err := Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	yamlDomains, err := Parse("api.yaml", []byte(`domain: api
failure_mode: allow
descriptors:
  - key: user
    rate_limits:
      - {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 30}
      - {unit: day, requests_per_unit: 1000, time_zone: UTC}
    descriptors:
      - key: path
        value: /a*
        share_threshold: true
        rate_limit: {unlimited: true, replaces: [{name: burst}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "api" || d.FailureMode != FailureAllow || d.File != "RateLimitConfig api" {
		t.Errorf("domain = %q %v %q", d.Name, d.FailureMode, d.File)
	}
	got, want := nodes(t, d), nodes(t, yamlDomains[0])
	if len(got) != len(want) {
		t.Fatalf("%d nodes, want %d", len(got), len(want))
	}
	for path, w := range want {
		g := got[path]
		if g == nil {
			t.Errorf("no node %q", path)
			continue
		}
		if !reflect.DeepEqual(rulesOf(g), rulesOf(w)) || g.Unlimited != w.Unlimited || g.ShareThreshold != w.ShareThreshold ||
			!reflect.DeepEqual(g.Replaces, w.Replaces) || g.Depth != w.Depth {
			t.Errorf("%s differs from its YAML twin: %+v vs %+v", path, g, w)
		}
		if g.File != "RateLimitConfig api" || g.Line != 0 {
			t.Errorf("%s at %s:%d, want the resource without a line", path, g.File, g.Line)
		}
	}
	if n := d.Match([]Entry{{Key: "user", Value: "x"}, {Key: "path", Value: "/abc"}}); n == nil || !n.Unlimited {
		t.Errorf("Match = %v, want the unlimited wildcard node", n)
	}
	if r := got["user"].Rules[0]; r.Algorithm != limit.TokenBucket || r.Burst != 30 {
		t.Errorf("user rule = %v", r)
	}
}

// TestCompileErrorsNameResourcePaths: without lines, every error names the
// source and the path of the value at fault.
func TestCompileErrorsNameResourcePaths(t *testing.T) {
	spec := DomainSpec{
		At:          Pos{Source: "RateLimitConfig x"},
		FailureMode: "sometimes",
		Descriptors: []DescriptorSpec{
			{Key: "a", RateLimits: []RuleSpec{{Unit: "fortnight"}}},
			{Key: "", Descriptors: []DescriptorSpec{{Key: "b", RateLimits: []RuleSpec{{Unit: "second", Burst: ptr[uint32](3)}}}}},
			{Key: "a"},
			{Key: "c", RateLimits: []RuleSpec{{Unit: "second"}, {Unit: "second"}}},
			{Key: "d", RateLimits: []RuleSpec{{Name: "b", Algorithm: "token_bucket", Unit: "second"}, {Name: "b", Algorithm: "gcra", Unit: "hour"}}},
		},
	}
	_, err := Compile(spec)
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("err = %v, want an ErrorList", err)
	}
	want := []string{
		"RateLimitConfig x: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight' (want second, minute, hour, day, week, month or year)",
		"RateLimitConfig x: descriptors[1].descriptors[0].rate_limit.burst: burst applies only to token_bucket, leaky_bucket and gcra, not fixed_window",
		"RateLimitConfig x: descriptors[1].key: descriptor has empty key",
		"RateLimitConfig x: descriptors[2]: duplicate descriptor composite key '.a' (first at descriptors[0])",
		"RateLimitConfig x: descriptors[3].rate_limits[1]: rate limit has the same algorithm, period and time zone as the one at descriptors[3].rate_limits[0] (fw.1se): they would share state",
		"RateLimitConfig x: descriptors[4].rate_limits[1]: rate limit has the same name as the meter at descriptors[4].rate_limits[0] (me.naf63df4c8601f1a5): they would share state",
		"RateLimitConfig x: domain: config file cannot have empty domain",
		"RateLimitConfig x: failure_mode: unknown failure_mode \"sometimes\" (want error, allow, deny or local)",
	}
	var got []string
	for _, e := range list {
		got = append(got, e.Error())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n%q\nwant:\n%q", got, want)
	}
}

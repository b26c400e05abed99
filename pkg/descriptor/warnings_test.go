package descriptor

import (
	"fmt"
	"strings"
	"testing"
)

// nestedYAML is a domain "api" of one chain of key-only descriptors k1 ..
// k<depth>, a limit at the deepest, and the path and line of the
// descriptor at depth at.
func nestedYAML(depth, at int) (yaml, path string, line int) {
	var b strings.Builder
	b.WriteString("domain: api\ndescriptors:\n")
	var keys []string
	for i := 1; i <= depth; i++ {
		ind := strings.Repeat("    ", i-1)
		fmt.Fprintf(&b, "%s  - key: k%d\n", ind, i)
		if i <= at {
			keys = append(keys, fmt.Sprintf("k%d", i))
		}
		if i < depth {
			fmt.Fprintf(&b, "%s    descriptors:\n", ind)
		} else {
			fmt.Fprintf(&b, "%s    rate_limit: {unit: second, requests_per_unit: 1}\n", ind)
		}
	}
	return b.String(), strings.Join(keys, "."), 3 + 2*(at-1)
}

// warningsCase is one config of TestWarnings and the warnings it gets.
type warningsCase struct {
	name string
	yaml string
	want []string // prefixes of each warning, in order; nil: no warning
}

func TestWarnings(t *testing.T) {
	tests := []warningsCase{
		{
			name: "small sliding log and other algorithms",
			yaml: `
domain: api
descriptors:
  - key: user
    rate_limits:
      - {algorithm: sliding_log, unit: minute, requests_per_unit: 1000}
      - {algorithm: sliding_window, unit: hour, requests_per_unit: 1000000}
      - {unit: day, requests_per_unit: 50000000}
`,
		},
		{
			name: "large sliding logs, nested",
			yaml: `
domain: api
descriptors:
  - key: user
    rate_limit: {name: burst, algorithm: sliding_log, unit: second, requests_per_unit: 5000}
    descriptors:
      - key: path
        value: /upload
        rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 10000000}
`,
			want: []string{
				"c.yaml:4: api.user: burst: sliding_log 5000/1 second keeps one entry per admitted request: up to 5000 per descriptor, about 566 KiB",
				"c.yaml:7: api.user.path_/upload: sliding_log 10000000/1 hour keeps one entry per admitted request: up to 10000000 per descriptor, about 1 GiB",
			},
		},
		{
			name: "a '*' in a key is literal, at any depth; Envoy Gateway's route descriptors are not warned about",
			yaml: `
domain: api
descriptors:
  - key: "x*"
    rate_limit: {unit: minute, requests_per_unit: 70}
  - key: path
    value: "/api/*"
    descriptors:
      - key: "*"
        value: "v*"
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: httproute/default/backend/rule/0/match/0/*
    value: httproute/default/backend/rule/0/match/0/*
    rate_limit: {unit: minute, requests_per_unit: 1}
`,
			want: []string{
				"c.yaml:4: key 'x*' holds '*', which sluice compares as a literal character: only a request key written 'x*' matches it; envoyproxy/ratelimit matches such a key as a wildcard",
				"c.yaml:9: key '*' holds '*', which sluice compares as a literal character",
			},
		},
	}
	// A descriptor as deep as a request's can be, and one level deeper:
	// one warning, at the first level beyond the default bound.
	deepest, _, _ := nestedYAML(MaxRequestEntries, 0)
	tooDeep, path, line := nestedYAML(MaxRequestEntries+3, MaxRequestEntries+1)
	tests = append(tests,
		warningsCase{"as deep as a request's descriptor can be", deepest, nil},
		warningsCase{"deeper than a request's descriptor can be", tooDeep, []string{
			fmt.Sprintf("c.yaml:%d: api.%s: this descriptor is %d entries deep, more than the %d entries a request's descriptor may carry elsewhere: domain api accepts descriptors of up to %d entries",
				line, path, MaxRequestEntries+1, MaxRequestEntries, MaxRequestEntries+3)}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, err := Parse("c.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			c, err := NewConfig(files...)
			if err != nil {
				t.Fatal(err)
			}
			got := c.Warnings()
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("warning %d:\n got %q\nwant prefix %q", i, got[i], w)
				}
			}
		})
	}
	var nilConfig *Config
	if w := nilConfig.Warnings(); w != nil {
		t.Errorf("nil config warns %q", w)
	}
}

func TestByteSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 116000: "113 KiB", 1 << 30: "1 GiB", 1<<64 - 1: "16 EiB"} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestStarKeyFromSpec: a key holding '*' that does not come from a file
// loads without a warning. Over xDS, Envoy Gateway's keys are route names
// whose last part is often a literal '*' (the hostname), and Envoy sends
// them back unchanged, so the key compares equal as written.
func TestStarKeyFromSpec(t *testing.T) {
	route := "httproute/default/backend/rule/0/match/0/*"
	d, err := Compile(DomainSpec{Name: "default/eg/http", Descriptors: []DescriptorSpec{{
		Key: route, Value: route,
		RateLimits: []RuleSpec{{Unit: "hour", RequestsPerUnit: 2}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConfig(d)
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings %q, want none", w)
	}
}

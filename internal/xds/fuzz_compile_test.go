package xds

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// FuzzCompile: whatever RateLimitConfig a management server sends (any
// bytes that decode as one, metadata extension included), Compile neither
// panics nor accepts half of it: it returns a Config whose trees can be
// walked and matched, or errors that each name a resource.
func FuzzCompile(f *testing.F) {
	ext, err := structpb.NewStruct(map[string]any{
		"sluice": map[string]any{"rate_limits": []any{
			map[string]any{"algorithm": "token_bucket", "unit": "second", "requests_per_unit": 3.0, "burst": 9.0},
			map[string]any{"algorithm": "fixed_window", "unit": "day", "time_zone": "Asia/Shanghai", "requests_per_unit": 1e9},
		}, "share_threshold": true, "value_to_metric": false},
		"other": "kept"})
	if err != nil {
		f.Fatal(err)
	}
	seeds := []*rlc{
		{Name: "api", Domain: "api", Descriptors: []*rld{
			{Key: "k", Value: "v*", RateLimit: &policy{Unit: 1, RequestsPerUnit: 5, Name: "n"},
				Descriptors: []*rld{{Key: "sub", RateLimit: &policy{Unlimited: true}}}},
		}},
		{Domain: "d", Descriptors: []*rld{{Key: "k", Metadata: ext}}},
		{Domain: "", Descriptors: []*rld{{Key: ""}, {Key: "k", RateLimit: &policy{Unit: 99, Replaces: nil}}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
	}
	f.Fuzz(func(t *testing.T, data []byte, merge bool) {
		conf := &rlc{}
		if proto.Unmarshal(data, conf) != nil {
			return
		}
		c, err := Compile([]*rlc{conf, proto.Clone(conf).(*rlc)}, CompileOptions{MergeDomains: merge})
		if err != nil {
			if c != nil {
				t.Fatalf("Compile returned a Config and an error: %v", err)
			}
			l, ok := err.(descriptor.ErrorList)
			if !ok {
				t.Fatalf("error %T is not a descriptor.ErrorList: %v", err, err)
			}
			for _, e := range l {
				if !strings.HasPrefix(e.File, "RateLimitConfig ") {
					t.Fatalf("error %q names no resource", e)
				}
			}
			return
		}
		for _, name := range c.Domains() {
			d := c.Domain(name)
			d.Walk(func(n *descriptor.Node) {
				d.Match([]descriptor.Entry{{Key: n.Key, Value: n.Value}})
			})
		}
		_ = c.Dump()
	})
}

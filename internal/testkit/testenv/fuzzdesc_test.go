package testenv

import (
	"reflect"
	"testing"

	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

func TestFuzzDescriptor(t *testing.T) {
	tests := []struct {
		name, data, domain string
		entries            [][2]string
	}{
		{"empty", "", "", nil},
		{"domain only", "\x03api", "api", nil},
		{"one entry", "\x03api\x04user\x05alice", "api", [][2]string{{"user", "alice"}}},
		{"key without a value", "\x03api\x04user", "api", [][2]string{{"user", ""}}},
		{"length past the end", "\x03api\x04user\x09ali", "api", [][2]string{{"user", "ali"}}},
		{"empty strings", "\x00\x00\x00\x01k\x00", "", [][2]string{{"", ""}, {"k", ""}}},
		{"any byte", "\x01|\x02{=\x01\xff", "|", [][2]string{{"{=", "\xff"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			domain, entries := FuzzDescriptor([]byte(tt.data))
			if domain != tt.domain || !reflect.DeepEqual(entries, tt.entries) {
				t.Errorf("FuzzDescriptor(%q) = %q, %q; want %q, %q", tt.data, domain, entries, tt.domain, tt.entries)
			}
		})
	}
}

// TestEveryNodeYAML: the config parses as one domain d and its rules use
// every algorithm.
func TestEveryNodeYAML(t *testing.T) {
	ds, err := descriptor.Parse("every.yaml", []byte(EveryNodeYAML))
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Name != "d" {
		t.Fatalf("%d domains, want one named d", len(ds))
	}
	seen := map[limit.Algorithm]bool{}
	ds[0].Walk(func(n *descriptor.Node) {
		for _, r := range n.Rules {
			seen[r.Algorithm] = true
		}
	})
	for _, a := range []limit.Algorithm{limit.FixedWindow, limit.SlidingLog, limit.SlidingWindow, limit.TokenBucket, limit.LeakyBucket, limit.GCRA} {
		if !seen[a] {
			t.Errorf("no rule of %s", a)
		}
	}
}

package metrics

import (
	"testing"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/sluice-rl/sluice/internal/service"
)

// TestFoldLogged: the first time a domain's detailed_metric values fold
// into _other, one warning names the domain and the cap; more folds of
// that domain log nothing more, another domain's first fold logs again.
// The first time a domain that is not configured folds into the _other
// domain, one warning names it and the cap, once per process. Before,
// folding was silent: dashboards lost per-value series with no word why.
func TestFoldLogged(t *testing.T) {
	const yaml = "domain: a\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 100}\n" +
		"---\ndomain: b\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
	type call struct{ domain, user string }
	for _, tc := range []struct {
		name  string
		calls []call
		want  []map[string]any // fields of the warnings, in order
	}{
		{"under the caps", []call{{"a", "1"}, {"a", "2"}, {"x1", "1"}}, nil},
		{"one domain folds", []call{{"a", "1"}, {"a", "2"}, {"a", "3"}, {"a", "4"}, {"a", "1"}},
			[]map[string]any{{"domain": "a", "cap": 2}}},
		{"each domain once", []call{{"a", "1"}, {"a", "2"}, {"a", "3"}, {"b", "1"}, {"b", "2"}, {"b", "3"}, {"a", "5"}, {"b", "5"}},
			[]map[string]any{{"domain": "a", "cap": 2}, {"domain": "b", "cap": 2}}},
		{"unknown domains once per process", []call{{"x1", "1"}, {"x2", "1"}, {"x3", "1"}, {"x4", "1"}},
			[]map[string]any{{"domain": "x2", "cap": 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, hook := logtest.NewNullLogger()
			h := newHarness(t, Options{MaxDetailedDescriptors: 2, MaxUnknownDomains: 1, Logger: log}, service.Options{}, yaml)
			for _, c := range tc.calls {
				if _, err := h.call(t, rq(c.domain, d("user", c.user))); err != nil {
					t.Fatal(err)
				}
			}
			entries := hook.AllEntries()
			if len(entries) != len(tc.want) {
				t.Fatalf("%d log lines, want %d: %v", len(entries), len(tc.want), entries)
			}
			for i, e := range entries {
				if e.Level.String() != "warning" {
					t.Errorf("line %d level %v, want warning", i, e.Level)
				}
				for k, v := range tc.want[i] {
					if e.Data[k] != v {
						t.Errorf("line %d %q: %s=%v, want %v", i, e.Message, k, e.Data[k], v)
					}
				}
			}
		})
	}
}

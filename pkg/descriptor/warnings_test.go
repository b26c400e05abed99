package descriptor

import (
	"strings"
	"testing"
)

func TestWarnings(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of each warning, in order; nil: no warning
	}{
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
	}
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

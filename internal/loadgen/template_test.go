package loadgen

import (
	"strings"
	"testing"
)

func TestTemplates(t *testing.T) {
	tests := []struct {
		template string
		n        uint64
		want     string // key=value pairs joined by ","
	}{
		{"remote_address={ip}", 0, "remote_address=10.0.0.0"},
		{"remote_address={ip}", 70000, "remote_address=10.1.17.112"},
		{"user={id},path=/api", 42, "user=id42,path=/api"},
		{"k={n}", 9, "k=9"},
		{"k=a{n}b{id}c{ip}", 1, "k=a1bid1c10.0.0.1"},
		{"{id}=x", 3, "id3=x"},
		{"header_match=a=b", 5, "header_match=a=b"},
		{"k=", 5, "k="},
	}
	for _, tt := range tests {
		tm, err := ParseTemplate(tt.template)
		if err != nil {
			t.Fatalf("%q: %v", tt.template, err)
		}
		d := tm.Expand(tt.n)
		var parts []string
		for _, e := range d.Entries {
			parts = append(parts, e.Key+"="+e.Value)
		}
		if got := strings.Join(parts, ","); got != tt.want {
			t.Errorf("%q with %d: %q, want %q", tt.template, tt.n, got, tt.want)
		}
		if tm.String() != tt.template {
			t.Errorf("String() = %q", tm.String())
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, s := range []string{"", " ", "novalue", "=v", "k={x}", "k={ip", "a=b,,c=d", "{ip=1"} {
		if _, err := ParseTemplate(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

// Different keys give different descriptors: {ip} is unique below 2^24.
func TestTemplateDistinct(t *testing.T) {
	tm, err := ParseTemplate("ip={ip}")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for n := uint64(0); n < 1<<24; n += 4099 {
		v := tm.Expand(n).Entries[0].Value
		if seen[v] {
			t.Fatalf("%q repeated at %d", v, n)
		}
		seen[v] = true
	}
}

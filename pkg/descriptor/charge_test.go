package descriptor

import (
	"strings"
	"testing"
)

// TestChargeOverLimit: charge_over_limit is read as a bool; absent, the
// node's field is nil (the service then decides from quota_mode and its
// default); anything else is an error naming the line.
func TestChargeOverLimit(t *testing.T) {
	tests := []struct {
		field   string
		want    string // "nil", "true", "false"
		wantErr string
	}{
		{"", "nil", ""},
		{"    charge_over_limit: true\n", "true", ""},
		{"    charge_over_limit: false\n", "false", ""},
		{"    charge_over_limit: sometimes\n", "", "x.yaml:6"},
	}
	for _, tt := range tests {
		src := "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n" + tt.field
		domains, err := Parse("x.yaml", []byte(src))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: error %v, want one naming %s", tt.field, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tt.field, err)
		}
		n := domains[0].Match([]Entry{{Key: "k", Value: "v"}})
		got := "nil"
		if n != nil && n.ChargeOverLimit != nil {
			got = map[bool]string{true: "true", false: "false"}[*n.ChargeOverLimit]
		}
		if n == nil || got != tt.want || !n.QuotaMode {
			t.Errorf("%q: node %v, charge_over_limit %s, want %s", tt.field, n, got, tt.want)
		}
	}
}

// TestDumpShowsCharge: /rlconfig's dump says per node whether a cost that
// does not fit is charged: as charge_over_limit says, else by quota_mode,
// else by the service's default.
func TestDumpShowsCharge(t *testing.T) {
	tests := []struct {
		fields string
		want   string
	}{
		{"", "quota_mode: false, charge_over_limit: default"},
		{"    quota_mode: true\n", "quota_mode: true, charge_over_limit: true (quota_mode)"},
		{"    charge_over_limit: true\n", "quota_mode: false, charge_over_limit: true"},
		{"    quota_mode: true\n    charge_over_limit: false\n", "quota_mode: true, charge_over_limit: false"},
	}
	for _, tt := range tests {
		src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n" + tt.fields
		domains, err := Parse("x.yaml", []byte(src))
		if err != nil {
			t.Fatalf("%q: %v", tt.fields, err)
		}
		c, err := NewConfig(domains...)
		if err != nil {
			t.Fatalf("%q: %v", tt.fields, err)
		}
		want := "d.k: fixed_window 1/1 minute, shadow_mode: false, " + tt.want + "\n"
		if got := c.Dump(); got != want {
			t.Errorf("%q: dump\n  %q\nwant\n  %q", tt.fields, got, want)
		}
	}
}

package descriptor

import (
	"reflect"
	"testing"

	"github.com/sluice-rl/sluice/pkg/identity"
)

func TestFailureMode(t *testing.T) {
	tests := []struct {
		in      string
		want    FailureMode
		wantErr bool
	}{
		{"", FailureError, false},
		{"error", FailureError, false},
		{"allow", FailureAllow, false},
		{"DENY", FailureDeny, false},
		{"Local", FailureLocal, false},
		{"open", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseFailureMode(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseFailureMode(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && tt.in != "" && got.String() != map[FailureMode]string{0: "error", 1: "allow", 2: "deny", 3: "local"}[got] {
			t.Errorf("String() = %q", got.String())
		}
	}
	if s := FailureMode(9).String(); s != "failure_mode(9)" {
		t.Errorf("String() of an invalid mode = %q", s)
	}
}

// TestEntryIsIdentityEntry: a request's entries are matched and encoded as
// one type, so the service converts them once, not twice.
func TestEntryIsIdentityEntry(t *testing.T) {
	entries := []Entry{{Key: "user", Value: "alice"}}
	if got, want := identity.Encode("api", entries), "api|user=alice"; got != want {
		t.Errorf("identity.Encode(descriptor entries) = %q, want %q", got, want)
	}
	if reflect.TypeFor[Entry]() != reflect.TypeFor[identity.Entry]() {
		t.Error("descriptor.Entry and identity.Entry are different types")
	}
}

// Package wanterr checks an error against the one a table-driven test case
// expects, named by a piece of its text: the case either wants an error
// containing that text or wants none.

package testenv

import (
	"strings"
	"testing"
)

// WantErr fails t unless err matches want: with want set, err must be non-nil
// and its message must contain want; with want empty, err must be nil. It
// reports whether the caller should go on checking the result, which is
// the case only when no error was wanted (and none came).
func WantErr(t testing.TB, err error, want string) bool {
	t.Helper()
	if want != "" {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err %v, want one containing %q", err, want)
		}
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

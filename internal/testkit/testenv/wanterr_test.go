package testenv

import (
	"errors"
	"testing"
)

func TestWantErr(t *testing.T) {
	boom := errors.New("open period -1s is negative")
	tests := []struct {
		name       string
		err        error
		want       string
		goOn, fail bool
	}{
		{name: "no error wanted, none came", goOn: true},
		{name: "no error wanted, one came", err: boom, fail: true},
		{name: "error wanted, it came", err: boom, want: "is negative"},
		{name: "error wanted, another came", err: boom, want: "not a number", fail: true},
		{name: "error wanted, none came", want: "is negative", fail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var goOn bool
			r := RunHelper(t, func(tb testing.TB) { goOn = WantErr(tb, tt.err, tt.want) })
			if failed := r.Failed != ""; failed != tt.fail {
				t.Errorf("failed %v (%q), want %v", failed, r.Failed, tt.fail)
			}
			if !tt.fail && goOn != tt.goOn {
				t.Errorf("go on %v, want %v", goOn, tt.goOn)
			}
		})
	}
}

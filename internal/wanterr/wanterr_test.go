package wanterr

import (
	"errors"
	"testing"
)

// recorder records a Fatal instead of ending the test that runs Check.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatal(...any)          { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestCheck(t *testing.T) {
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
			r := &recorder{TB: t}
			goOn := Check(r, tt.err, tt.want)
			if r.failed != tt.fail {
				t.Errorf("failed %v, want %v", r.failed, tt.fail)
			}
			if !tt.fail && goOn != tt.goOn {
				t.Errorf("go on %v, want %v", goOn, tt.goOn)
			}
		})
	}
}

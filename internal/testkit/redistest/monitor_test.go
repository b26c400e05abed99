package redistest

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestParseMonitorLine(t *testing.T) {
	tests := []struct {
		in      string
		want    MonitorLine
		wantErr bool
	}{
		{`1700000000.123456 [0 127.0.0.1:4242] "evalsha" "ab" "1" "k{x}" "a b"` + "\r\n",
			MonitorLine{Source: "127.0.0.1:4242", Args: []string{"evalsha", "ab", "1", "k{x}", "a b"}}, false},
		{`+1700000000.123470 [0 lua] "incrby" "k" "1"`, MonitorLine{Source: "lua", Args: []string{"incrby", "k", "1"}}, false},
		{`1.0 [0 unix:/tmp/r.sock] "set" "q\"uo\\te" "\x00\xff\n\r\t\a\b"`,
			MonitorLine{Source: "unix:/tmp/r.sock", Args: []string{"set", `q"uo\te`, "\x00\xff\n\r\t\a\b"}}, false},
		{`1.0 [0 lua] "time"`, MonitorLine{Source: "lua", Args: []string{"time"}}, false},
		{`1.0 no brackets "x"`, MonitorLine{}, true},
		{`1.0 [0 lua] "unterminated`, MonitorLine{}, true},
		{`1.0 [0 lua] bare`, MonitorLine{}, true},
		{`1.0 [0 lua] "\x4"`, MonitorLine{}, true},
		{`1.0 [0 lua] "\xzz"`, MonitorLine{}, true},
	}
	for _, tt := range tests {
		got, err := ParseMonitorLine(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseMonitorLine(%q) error %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if got.Source != tt.want.Source || !slices.Equal(got.Args, tt.want.Args) {
			t.Errorf("ParseMonitorLine(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestDeclaredKeys(t *testing.T) {
	tests := []struct {
		args   []string
		want   []string
		isCall bool
	}{
		{[]string{"EVALSHA", "ab", "2", "k1", "k2", "arg"}, []string{"k1", "k2"}, true},
		{[]string{"fcall", "f", "0", "arg"}, []string{}, true},
		{[]string{"fcall", "f", "3", "k1"}, nil, true}, // numkeys beyond the arguments
		{[]string{"incrby", "k", "1"}, nil, false},
	}
	for _, tt := range tests {
		got, ok := MonitorLine{Args: tt.args}.DeclaredKeys()
		if ok != tt.isCall || !slices.Equal(got, tt.want) {
			t.Errorf("DeclaredKeys(%q) = %q, %v; want %q, %v", tt.args, got, ok, tt.want, tt.isCall)
		}
	}
}

// TestUndeclaredKeys runs, under MONITOR, a script that touches one key
// it declares and one it does not: UndeclaredKeys names the second only.
func TestUndeclaredKeys(t *testing.T) {
	s := Standalone(t)
	c := s.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := StartMonitor(t, s.Addr(), "")
	const script = `redis.call('set', KEYS[1], 'x'); redis.call('time'); redis.call('incr', KEYS[1] .. ':hidden'); return 1`
	if err := c.Eval(ctx, script, []string{"k{a}"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "plain", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m.Sync(t, c)
	bad, calls, commands, err := UndeclaredKeys(ctx, c, m.Take(t))
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || commands != 3 {
		t.Errorf("checked %d calls and %d commands, want 1 and 3", calls, commands)
	}
	if len(bad) != 1 || bad[0].Key != "k{a}:hidden" || bad[0].Command.Command() != "incr" {
		t.Fatalf("UndeclaredKeys = %v, want the INCR of k{a}:hidden", bad)
	}
	t.Log(bad[0])
}

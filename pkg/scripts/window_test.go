package scripts

import (
	"context"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestClusterAllowsUndeclaredKeyOfDeclaredSlot proves what the window
// counters rely on (CONTRACT.md, "Keys"): on a real 3-master Redis Cluster
// a script, and a function, may write a key it did not declare in KEYS when
// that key is in the slot of a declared one (same hash tag); and Redis does
// refuse an undeclared key of another node, and a function one of another
// slot, so the check is there. (A script without a shebang, run by EVAL, is
// let touch other slots of its node: Redis 7 keeps that for old scripts.)
func TestClusterAllowsUndeclaredKeyOfDeclaredSlot(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{})
	cc := c.Client()
	ctx := context.Background()
	const body = "return redis.call('INCRBY', ARGV[1], 1)"
	const lib = "#!lua name=slotproof\nredis.register_function('slotproof', function(KEYS, ARGV) " + body + " end)\n"
	for _, m := range c.Masters() {
		if err := c.NodeClient(m).FunctionLoadReplace(ctx, lib).Err(); err != nil {
			t.Fatal(err)
		}
	}
	declared := "sluice_{a|b}"
	home, err := c.KeySlot(declared)
	if err != nil {
		t.Fatal(err)
	}
	homeNode, err := c.MasterOf(home)
	if err != nil {
		t.Fatal(err)
	}
	// A key of another slot on the same node, and one on another node.
	var sameNode, otherNode string
	for i := 0; sameNode == "" || otherNode == ""; i++ {
		k := "sluice_{" + string(rune('c'+i%20)) + string(rune('a'+i/20)) + "}:fw.1se:1"
		s, err := c.KeySlot(k)
		if err != nil {
			t.Fatal(err)
		}
		n, err := c.MasterOf(s)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case s != home && n == homeNode && sameNode == "":
			sameNode = k
		case n != homeNode && otherNode == "":
			otherNode = k
		}
	}
	for _, tc := range []struct {
		name, key       string
		evalOK, fcallOK bool
	}{
		{"window key of the declared slot", declared + ":fw.1se:1763900000", true, true},
		{"another slot of the same node", sameNode, true, false},
		{"a slot of another node", otherNode, false, false},
	} {
		for _, fcall := range []bool{false, true} {
			var err error
			if fcall {
				err = cc.FCall(ctx, "slotproof", []string{declared}, tc.key).Err()
			} else {
				err = cc.Eval(ctx, body, []string{declared}, tc.key).Err()
			}
			want := tc.evalOK
			if fcall {
				want = tc.fcallOK
			}
			if (err == nil) != want {
				t.Errorf("%s (%s, FCALL %v): error %v", tc.name, tc.key, fcall, err)
			} else {
				t.Logf("%s (FCALL %v): %v", tc.name, fcall, err)
			}
		}
	}
}

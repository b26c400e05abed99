package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// keysIn returns n keys of one slot: name{tag}:i.
func keysIn(tag string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k{%s}:%d", tag, i)
	}
	return out
}

// otherMaster returns a master other than m.
func otherMaster(t *testing.T, c *ClusterSet, m string) string {
	t.Helper()
	for _, o := range c.Masters() {
		if o != m {
			return o
		}
	}
	t.Fatalf("no master other than %s", m)
	return ""
}

// TestMoveSlot checks Slot against CLUSTER KEYSLOT, then moves a slot holding five keys by hand while a client keeps
// writing one of them between the steps: every key ends on the target with
// its last value, the callback saw each key migrated, and the slot is the
// target's.
func TestMoveSlot(t *testing.T) {
	c := Cluster(t, ClusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Slot agrees with CLUSTER KEYSLOT, hash tags included.
	for _, key := range []string{"", "a", "foo", "{user1000}.following", "x{}y", "{}{a}", "a{b", "{a}{b}", "sluice{d|k=v}:fw.1ho:1700000000", "héllo"} {
		want, err := c.KeySlot(key)
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
	cl := c.Client()
	keys := keysIn("move", 5)
	for _, k := range keys {
		if err := cl.Set(ctx, k, "0", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := Slot(keys[0])
	from, err := c.MasterOf(slot)
	if err != nil {
		t.Fatal(err)
	}
	to := otherMaster(t, c, from)
	var steps []MoveStep
	err = c.MoveSlot(ctx, slot, to, MoveOptions{
		Between: func(s MoveStep) error {
			steps = append(steps, s)
			// A write between the steps: on the source until its key
			// moved, then ASK-redirected to the target (go-redis follows
			// it).
			return cl.Incr(ctx, keys[0]).Err()
		},
		// keys[0] last, so most writes reach it on the source.
		Order: func(ks []string) { slices.Sort(ks); slices.Reverse(ks) },
	})
	if err != nil {
		t.Fatalf("MoveSlot: %v", err)
	}
	if len(steps) != len(keys)+2 {
		t.Errorf("callback ran %d times, want %d (before, after each of %d keys, at the end)", len(steps), len(keys)+2, len(keys))
	}
	last := steps[len(steps)-1]
	if got := slices.Sorted(slices.Values(last.Moved)); !slices.Equal(got, slices.Sorted(slices.Values(keys))) {
		t.Errorf("moved %v, want %v", got, keys)
	}
	if m, err := c.MasterOf(slot); err != nil || m != to {
		t.Errorf("slot %d served by %q (%v), want %s", slot, m, err, to)
	}
	dst := c.NodeClient(to)
	for _, k := range keys {
		want := "0"
		if k == keys[0] {
			want = fmt.Sprint(len(steps))
		}
		if got, err := dst.Get(ctx, k).Result(); err != nil || got != want {
			t.Errorf("%s on the target = %q, %v; want %s", k, got, err, want)
		}
	}
	if err := c.WaitHealthy(clusterTimeout); err != nil {
		t.Fatal(err)
	}
}

// TestMoveSlotReportsBusyKey: a key written on the importing target under
// ASKING while the same key is still on the source makes MIGRATE fail
// with BUSYKEY, which MoveSlot reports as a *MoveError naming the key.
func TestMoveSlotReportsBusyKey(t *testing.T) {
	c := Cluster(t, ClusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.Client()
	key := "k{busy}"
	if err := cl.Set(ctx, key, "source", 0).Err(); err != nil {
		t.Fatal(err)
	}
	slot := Slot(key)
	from, err := c.MasterOf(slot)
	if err != nil {
		t.Fatal(err)
	}
	to := otherMaster(t, c, from)
	dst := c.NodeClient(to)
	err = c.MoveSlot(ctx, slot, to, MoveOptions{Between: func(s MoveStep) error {
		if len(s.Moved) > 0 || s.Key != "" {
			return nil
		}
		// What a script's undeclared key does: a write of the same name on
		// the importing node while the source still holds it.
		_, err := dst.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "asking")
			p.Set(ctx, key, "target", 0)
			return nil
		})
		return err
	}})
	var me *MoveError
	if !errors.As(err, &me) || !me.Busy() || me.Key != key {
		t.Fatalf("MoveSlot = %v, want a *MoveError with BUSYKEY for %s", err, key)
	}
}

// TestReshard runs redis-cli --cluster reshard for three slots holding keys
// and finds them served, keys and all, by the target.
func TestReshard(t *testing.T) {
	c := Cluster(t, ClusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	masters := c.Masters()
	from, to := masters[0], masters[1]
	slots, err := c.SlotsOf(ctx, from)
	if err != nil || len(slots) < 3 {
		t.Fatalf("slots of %s: %v, %v", from, slots, err)
	}
	// A key in the source's lowest slot, the first redis-cli moves.
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); Slot(k) == slots[0] {
			key = k
		}
	}
	cl := c.Client()
	if err := cl.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	out, err := c.Reshard(ctx, from, to, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Moving slot") {
		t.Errorf("output without a slot moved:\n%s", out)
	}
	for _, s := range slots[:3] {
		if m, err := c.MasterOf(s); err != nil || m != to {
			t.Errorf("slot %d served by %q (%v), want %s", s, m, err, to)
		}
	}
	if got, err := c.NodeClient(to).Get(ctx, key).Result(); err != nil || got != "v" {
		t.Errorf("%s on the target = %q, %v", key, got, err)
	}
}

package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Slot returns the Redis Cluster hash slot of key, as CLUSTER KEYSLOT
// computes it: CRC16 (XMODEM) of the key's hash tag (the part between the
// first '{' and the next '}', when not empty) or of the whole key, modulo
// 16384. It needs no server, so a test can search many names for one that
// lands on a given slot.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// NodeID returns the cluster node id of the node at addr.
func (c *ClusterSet) NodeID(ctx context.Context, addr string) (string, error) {
	cl := c.adminClient(addr)
	defer cl.Close()
	id, err := cl.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		return "", fmt.Errorf("CLUSTER MYID on %s: %w", addr, err)
	}
	return id, nil
}

// SlotsOf returns the slots the master at addr serves, in ascending order.
func (c *ClusterSet) SlotsOf(ctx context.Context, addr string) ([]int, error) {
	nodes, err := c.nodesView(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster nodes: %w", err)
	}
	var out []int
	for _, n := range nodes {
		if n.addr != addr {
			continue
		}
		for _, r := range n.slots {
			for s := r[0]; s <= r[1]; s++ {
				out = append(out, s)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}

// MoveStep is what MoveSlot reports to its callback: where the move is.
type MoveStep struct {
	// Slot is the slot being moved, From and To the masters' addresses.
	Slot     int
	From, To string
	// Moved lists the keys migrated so far, in order; Key is the one just
	// migrated, empty before the first key and after the last.
	Moved []string
	Key   string
}

// MoveError is a step of MoveSlot that Redis refused: the command, the
// key it concerned (for MIGRATE) and Redis's reply, such as
// "ERR Target instance replied with error: BUSYKEY Target key name already
// exists.". The slot is left where that step left it (importing and
// migrating).
type MoveError struct {
	Step string
	Key  string
	Err  error
}

func (e *MoveError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("move slot: %s %q: %v", e.Step, e.Key, e.Err)
	}
	return fmt.Sprintf("move slot: %s: %v", e.Step, e.Err)
}

func (e *MoveError) Unwrap() error { return e.Err }

// Busy reports whether the target refused a key because it already held
// one of that name (MIGRATE's BUSYKEY).
func (e *MoveError) Busy() bool { return strings.Contains(e.Err.Error(), "BUSYKEY") }

// MoveOptions shape MoveSlot.
type MoveOptions struct {
	// Between is called after SETSLOT MIGRATING (Key empty), after each
	// key migrated, and once more before SETSLOT NODE (Key empty); an
	// error from it stops the move and is returned. Nil calls nothing.
	Between func(MoveStep) error
	// Order, when set, reorders in place the keys of each GETKEYSINSLOT
	// reply before they are migrated, so a test can choose which of a
	// descriptor's keys reach the target first. Nil keeps Redis's order.
	Order func(keys []string)
}

// MoveSlot moves slot from the master serving it to the master at to, by
// the steps `redis-cli --cluster reshard` takes, done one at a time so
// that requests can flow between them: CLUSTER SETSLOT IMPORTING on the
// target, MIGRATING on the source, then CLUSTER GETKEYSINSLOT (up to 100
// keys at a time) and MIGRATE one key at a time (without REPLACE, as
// redis-cli) until the source holds none of the slot's keys, then CLUSTER
// SETSLOT NODE on the target, the source and the other masters. A step
// Redis refuses is returned as a *MoveError (BUSYKEY included), after
// which the slot is still importing and migrating.
func (c *ClusterSet) MoveSlot(ctx context.Context, slot int, to string, opts MoveOptions) error {
	from, err := c.MasterOf(slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("move slot %d: %s already serves it", slot, to)
	}
	fromID, err := c.NodeID(ctx, from)
	if err != nil {
		return err
	}
	toID, err := c.NodeID(ctx, to)
	if err != nil {
		return err
	}
	src, dst := c.adminClient(from), c.adminClient(to)
	defer src.Close()
	defer dst.Close()
	if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", fromID).Err(); err != nil {
		return &MoveError{Step: "CLUSTER SETSLOT IMPORTING on " + to, Err: err}
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", toID).Err(); err != nil {
		return &MoveError{Step: "CLUSTER SETSLOT MIGRATING on " + from, Err: err}
	}
	step := MoveStep{Slot: slot, From: from, To: to}
	call := func(key string) error {
		if opts.Between == nil {
			return nil
		}
		step.Key = key
		if err := opts.Between(step); err != nil {
			return fmt.Errorf("move slot %d: %w", slot, err)
		}
		return nil
	}
	if err := call(""); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(to)
	if err != nil {
		return err
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return &MoveError{Step: "CLUSTER GETKEYSINSLOT on " + from, Err: err}
		}
		if len(keys) == 0 {
			break
		}
		if opts.Order != nil {
			opts.Order(keys)
		}
		for _, k := range keys {
			args := []any{"migrate", host, port, "", 0, 5000}
			if pw := c.password(); pw != "" {
				args = append(args, "auth", pw)
			}
			args = append(args, "keys", k)
			// NOKEY: the key expired, or was deleted, since GETKEYSINSLOT.
			if err := src.Do(ctx, args...).Err(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
				return &MoveError{Step: "MIGRATE from " + from + " to " + to, Key: k, Err: err}
			}
			step.Moved = append(step.Moved, k)
			if err := call(k); err != nil {
				return err
			}
		}
	}
	if err := call(""); err != nil {
		return err
	}
	return c.assignSlot(ctx, slot, toID, to, from)
}

// assignSlot runs CLUSTER SETSLOT slot NODE id on the new owner first, then
// on the old one, then on every other master, as redis-cli does; the other
// masters also learn it by gossip, so their refusals are not errors.
func (c *ClusterSet) assignSlot(ctx context.Context, slot int, id, to, from string) error {
	for _, addr := range []string{to, from} {
		cl := c.adminClient(addr)
		err := cl.Do(ctx, "cluster", "setslot", slot, "node", id).Err()
		_ = cl.Close()
		if err != nil {
			return &MoveError{Step: "CLUSTER SETSLOT NODE on " + addr, Err: err}
		}
	}
	for _, m := range c.Masters() {
		if m == to || m == from {
			continue
		}
		cl := c.adminClient(m)
		_ = cl.Do(ctx, "cluster", "setslot", slot, "node", id).Err()
		_ = cl.Close()
	}
	return nil
}

// Reshard runs the real `redis-cli --cluster reshard` (or valkey-cli, see
// CLIName) without questions: it moves the n lowest-numbered slots of the
// master at from to the master at to, migrating their keys pipeline at a
// time (pipeline 0 means redis-cli's default, 10). It returns the cli's
// output; a non-zero exit, or an output reporting an error ("[ERR]", such
// as a MIGRATE refused with BUSYKEY), is an error that carries the output.
func (c *ClusterSet) Reshard(ctx context.Context, from, to string, n, pipeline int) (string, error) {
	cli, err := cliBinary()
	if err != nil {
		return "", err
	}
	fromID, err := c.NodeID(ctx, from)
	if err != nil {
		return "", err
	}
	toID, err := c.NodeID(ctx, to)
	if err != nil {
		return "", err
	}
	args := []string{"--cluster", "reshard", from,
		"--cluster-from", fromID, "--cluster-to", toID,
		"--cluster-slots", strconv.Itoa(n), "--cluster-yes"}
	if pipeline > 0 {
		args = append(args, "--cluster-pipeline", strconv.Itoa(pipeline))
	}
	args = append(args, cliAuthArgs(c.opts.Args)...)
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err == nil && strings.Contains(string(out), "[ERR]") {
		err = errors.New("reported an error")
	}
	if err != nil {
		return string(out), fmt.Errorf("%s --cluster reshard %d slots from %s to %s: %w\n%s", CLIName(), n, from, to, err, out)
	}
	return string(out), nil
}

// NodeClientOf is NodeClient of the master serving key's slot now.
func (c *ClusterSet) NodeClientOf(key string) (*redis.Client, error) {
	m, err := c.MasterOf(Slot(key))
	if err != nil {
		return nil, err
	}
	return c.NodeClient(m), nil
}

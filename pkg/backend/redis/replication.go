package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Replica is one replica as its master reports it in INFO replication:
// how far behind the master it is, which is what a failover to it would
// forget (docs/operations.md, "Failover").
type Replica struct {
	// Master names the master: its address (cluster, single) or the
	// Sentinel master name. Replica is the replica's address as the master
	// sees it (ip:port).
	Master, Replica string
	// State is the replica's state as the master reports it ("online",
	// "wait_bgsave", "send_bulk", ...).
	State string
	// Lag is the time since the replica last acknowledged the master's
	// stream (INFO's lag, whole seconds; replicas acknowledge every
	// second, so 0 or 1 is healthy).
	Lag time.Duration
	// Behind is how many bytes of the master's replication stream the
	// replica has not acknowledged (master_repl_offset minus its offset).
	Behind int64
}

// Replicas reads INFO replication of the master (single, Sentinel) or of
// every cluster master, and returns their replicas. A master that does not
// answer is an error; the replicas of those that did are returned with it.
func (b *Backend) Replicas(ctx context.Context) ([]Replica, error) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	if b.cluster == nil {
		info, err := b.client.Info(ctx, "replication").Result()
		if err != nil {
			return nil, fmt.Errorf("redis backend: INFO replication: %w", err)
		}
		return parseReplicas(b.masterName(), info), nil
	}
	var (
		mu  sync.Mutex
		out []Replica
	)
	err := b.cluster.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("INFO replication of %s: %w", c.Options().Addr, err)
		}
		rs := parseReplicas(c.Options().Addr, info)
		mu.Lock()
		out = append(out, rs...)
		mu.Unlock()
		return nil
	})
	if err != nil {
		err = fmt.Errorf("redis backend: %w", err)
	}
	return out, err
}

// masterName is how Replicas names the one master of a single or Sentinel
// backend: its address, or the Sentinel master name (the address changes
// with failovers).
func (b *Backend) masterName() string {
	if b.opts.Type == TypeSentinel {
		name, _, _ := strings.Cut(b.opts.URL, ",")
		return strings.TrimSpace(name)
	}
	if c, ok := b.client.(*goredis.Client); ok {
		return c.Options().Addr
	}
	return ""
}

// parseReplicas reads the replica lines of INFO replication:
//
//	master_repl_offset:1234
//	slave0:ip=127.0.0.1,port=6380,state=online,offset=1200,lag=0
func parseReplicas(master, info string) []Replica {
	var offset int64
	var lines []string
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			offset, _ = strconv.ParseInt(v, 10, 64)
			continue
		}
		name, fields, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "slave") || strings.Contains(name, "_") {
			continue // slave_read_only, slave_repl_offset, ...: a replica's own fields
		}
		if _, err := strconv.Atoi(strings.TrimPrefix(name, "slave")); err != nil {
			continue
		}
		lines = append(lines, fields)
	}
	var out []Replica
	for _, fields := range lines {
		r := Replica{Master: master}
		var ip, port string
		var off int64 = -1
		for _, kv := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				port = v
			case "state":
				r.State = v
			case "offset":
				off, _ = strconv.ParseInt(v, 10, 64)
			case "lag":
				if s, err := strconv.ParseInt(v, 10, 64); err == nil {
					r.Lag = time.Duration(s) * time.Second
				}
			}
		}
		r.Replica = ip + ":" + port
		if off >= 0 && offset > off {
			r.Behind = offset - off
		}
		out = append(out, r)
	}
	return out
}

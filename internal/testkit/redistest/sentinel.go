package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// SentinelSet is one master, one replica and one sentinel watching them
// under the name MasterName().
type SentinelSet struct {
	root      string
	password  string // the data nodes' --requirepass, if any
	master    *process
	replica   *process
	sentinels []*process

	clients clientList
}

const masterName = "sluice-test"

// Sentinel starts a sentinel set and stops it when t ends. args are extra
// redis-server options for the master and the replica; with
// "--requirepass", PASSWORD the replica and the sentinel authenticate to
// the master with it (the sentinel itself needs none). It fails t if
// redis-server is not installed or the set does not come up.
func Sentinel(t testing.TB, args ...string) *SentinelSet {
	t.Helper()
	s, err := StartSentinel(args...)
	return started(t, "redis sentinel set", s, err)
}

// StartSentinel is Sentinel for callers without a testing.TB; the caller
// must Close the set.
func StartSentinel(args ...string) (*SentinelSet, error) {
	root, err := tempRoot()
	if err != nil {
		return nil, err
	}
	s := &SentinelSet{root: root}
	if a := cliAuthArgs(args); a != nil {
		s.password = a[1]
	}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	s.master, err = newProcess(root, "master", func(port, _ int) []string {
		return baseConfig(filepath.Join(root, "master"), port)
	}, false, false, args)
	if err != nil {
		return nil, err
	}
	masterPort := s.master.port
	s.replica, err = newProcess(root, "replica", func(port, _ int) []string {
		conf := append(baseConfig(filepath.Join(root, "replica"), port),
			"replicaof 127.0.0.1 "+strconv.Itoa(masterPort))
		if s.password != "" {
			conf = append(conf, "masterauth "+s.password)
		}
		return conf
	}, false, false, args)
	if err != nil {
		return nil, err
	}
	sen, err := newProcess(root, "sentinel", func(port, _ int) []string {
		conf := []string{
			"bind 127.0.0.1",
			"port " + strconv.Itoa(port),
			"dir " + filepath.Join(root, "sentinel"),
			"logfile " + filepath.Join(root, "sentinel", "redis.log"),
			"daemonize no",
			"sentinel monitor " + masterName + " 127.0.0.1 " + strconv.Itoa(masterPort) + " 1",
			"sentinel down-after-milliseconds " + masterName + " 1000",
			"sentinel failover-timeout " + masterName + " 5000",
			"sentinel parallel-syncs " + masterName + " 1",
		}
		if s.password != "" {
			conf = append(conf, "sentinel auth-pass "+masterName+" "+s.password)
		}
		return conf
	}, false, true, nil)
	if err != nil {
		return nil, err
	}
	s.sentinels = append(s.sentinels, sen)

	err = waitFor(clusterTimeout, "sentinel sees the replica", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cl := adminClient(sen.addr(), "")
		defer cl.Close()
		addr, err := cl.Do(ctx, "SENTINEL", "get-master-addr-by-name", masterName).StringSlice()
		if err != nil {
			return err
		}
		if len(addr) != 2 || addr[1] != strconv.Itoa(masterPort) {
			return fmt.Errorf("sentinel reports master %v", addr)
		}
		reps, err := cl.Do(ctx, "SENTINEL", "replicas", masterName).Slice()
		if err != nil {
			return err
		}
		if len(reps) == 0 {
			return errors.New("sentinel knows no replica yet")
		}
		rc := adminClient(s.replica.addr(), s.password)
		defer rc.Close()
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return errors.New("replica link down")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// adminClient opens a short-lived client to one process.
func adminClient(addr, password string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		Password:                 password,
		DialTimeout:              500 * time.Millisecond,
		ReadTimeout:              2 * time.Second,
		WriteTimeout:             2 * time.Second,
		MaxRetries:               -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// MasterName is the name the sentinels know the master by.
func (s *SentinelSet) MasterName() string { return masterName }

// SentinelAddrs lists the sentinels' addresses.
func (s *SentinelSet) SentinelAddrs() []string {
	out := make([]string, len(s.sentinels))
	for i, p := range s.sentinels {
		out[i] = p.addr()
	}
	return out
}

// MasterAddr is the address of the master the set started with.
func (s *SentinelSet) MasterAddr() string { return s.master.addr() }

// ReplicaAddr is the address of the replica the set started with.
func (s *SentinelSet) ReplicaAddr() string { return s.replica.addr() }

// MasterPID is the process id of the initial master.
func (s *SentinelSet) MasterPID() int { return s.master.pid() }

// PauseReplica freezes the replica the set started with (SIGSTOP): it
// reads nothing more of the master's stream, nor acknowledges it, until
// ResumeReplica; what the master sends meanwhile waits in the socket
// buffers (tens of MB on loopback) and then in the master's output buffer.
func (s *SentinelSet) PauseReplica() { s.replica.signal(syscall.SIGSTOP) }

// ResumeReplica continues a paused replica (SIGCONT).
func (s *SentinelSet) ResumeReplica() { s.replica.signal(syscall.SIGCONT) }

// KillMaster kills the initial master (SIGKILL); the sentinel promotes the
// replica after about a second.
func (s *SentinelSet) KillMaster() { s.master.kill() }

// Client returns a go-redis client for the current master, found through
// the sentinels; closed with the set.
func (s *SentinelSet) Client() *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    masterName,
		SentinelAddrs: s.SentinelAddrs(),
		Password:      s.password,
		DialTimeout:   time.Second,
		ReadTimeout:   5 * time.Second,
		WriteTimeout:  5 * time.Second,
	})
	s.clients.add(c)
	return c
}

// Close closes the clients handed out, stops every process by PID and
// removes the files. It is safe to call more than once.
func (s *SentinelSet) Close() {
	s.clients.closeAll()
	for _, p := range append(s.sentinels, s.replica, s.master) {
		if p != nil {
			p.stop()
		}
	}
	_ = os.RemoveAll(s.root)
}

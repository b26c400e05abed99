package redis

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestParseReplicas reads INFO replication of a master.
func TestParseReplicas(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n" +
		"slave0:ip=127.0.0.1,port=6380,state=online,offset=900,lag=0\r\n" +
		"slave1:ip=10.0.0.2,port=6381,state=wait_bgsave,offset=0,lag=7\r\n" +
		"master_failover_state:no-failover\r\nmaster_replid:abc\r\nmaster_repl_offset:1000\r\n"
	got := parseReplicas("m", info)
	want := []Replica{
		{Master: "m", Replica: "127.0.0.1:6380", State: "online", Behind: 100},
		{Master: "m", Replica: "10.0.0.2:6381", State: "wait_bgsave", Lag: 7 * time.Second, Behind: 1000},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseReplicas = %+v, want %+v", got, want)
	}
	// A replica's own INFO lists no replicas.
	if got := parseReplicas("r", "role:slave\r\nslave_repl_offset:10\r\nslave_read_only:1\r\nmaster_repl_offset:10\r\n"); len(got) != 0 {
		t.Errorf("a replica's INFO: %+v, want none", got)
	}
}

// TestReplicasCluster: on the cluster, Replicas lists one replica per
// master, named by the master's address.
func TestReplicasCluster(t *testing.T) {
	c := cluster.Get(t)
	b := newBackend(t, clusterOptions(c))
	rs, err := b.Replicas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	masters := c.Masters()
	if len(rs) != len(masters) {
		t.Fatalf("Replicas = %+v, want one per master %v", rs, masters)
	}
	for _, r := range rs {
		if !slices.Contains(masters, r.Master) || r.Replica == "" || r.State == "" {
			t.Errorf("replica %+v: want a master of %v, an address and a state", r, masters)
		}
	}
}

package compat

import (
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// password is the Redis password of the auth variants, as in the
// incumbent's tests.
const password = "password123"

// cluster is the Redis Cluster (with a password, as the incumbent's cluster
// tests use) shared by the cases; each isolates its keys with its own
// CACHE_KEY_PREFIX.
var cluster = &redistest.SharedCluster{Options: redistest.ClusterOptions{
	Args: []string{"--requirepass", password, "--masterauth", password},
}}

func TestMain(m *testing.M) { sluicetest.Main(m, cluster.Close) }

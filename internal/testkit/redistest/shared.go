package redistest

import (
	"sync"
	"testing"
)

// SharedCluster starts one cluster for a whole test package, on first use,
// so a package's cluster tests pay the start-up once. Declare it at package
// level in a _test.go file and Close it from TestMain after m.Run:
//
//	var cluster = &redistest.SharedCluster{}
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		cluster.Close()
//		os.Exit(code)
//	}
//
// Tests sharing a cluster must not disturb each other: use distinct keys
// (a distinct key prefix per test) and start a private Cluster for tests
// that kill nodes.
type SharedCluster struct {
	// Options shape the cluster; set them before the first Get.
	Options ClusterOptions

	once sync.Once
	c    *ClusterSet
	err  error
}

// Get returns the shared cluster, starting it on the first call. It skips
// t if redis-server is not installed and fails t if the cluster did not
// start (every later Get fails the same way, without retrying).
func (s *SharedCluster) Get(t testing.TB) *ClusterSet {
	t.Helper()
	s.once.Do(func() { s.c, s.err = StartCluster(s.Options) })
	requireStarted(t, "shared redis cluster", s.err)
	return s.c
}

// Close stops the cluster if it was started.
func (s *SharedCluster) Close() {
	s.once.Do(func() {}) // no start after Close
	if s.c != nil {
		s.c.Close()
	}
}

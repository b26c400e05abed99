package redis

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
)

// cluster is one Redis Cluster shared by the tests of this package that do
// not kill nodes; each test uses its own key prefix.
var cluster = &redistest.SharedCluster{}

func TestMain(m *testing.M) {
	code := m.Run()
	cluster.Close()
	os.Exit(code)
}

// quietLogger discards log output.
func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// newBackend builds a Backend and closes it when t ends.
func newBackend(t testing.TB, opts Options) *Backend {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// clusterOptions points Options at a test cluster.
func clusterOptions(c *redistest.ClusterSet) Options {
	return Options{Type: TypeCluster, URL: strings.Join(c.Addrs(), ",")}
}

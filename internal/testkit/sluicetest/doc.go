// Package sluicetest runs the real sluice binary for black-box tests.
//
// Binary builds ./cmd/sluice once per test process. Start runs
// `sluice serve` on free 127.0.0.1 ports, waits until /healthcheck answers
// and hands back a Process: its addresses, a gRPC RateLimitService client on
// one shared connection, its captured logs, and Stop (SIGTERM, expect exit
// 0) and Kill (SIGKILL). Every process is killed by its PID when the test
// ends, and its logs are printed if the test failed. The process handling
// itself (environment, log capture, listen addresses, signals) is
// internal/sluiceproc's, which cmd/sluice-soak shares.
//
// A typical test:
//
//	p := sluicetest.Start(t, sluicetest.Options{
//		ConfigDir: dir,
//		Env:       map[string]string{"REDIS_URL": redis.Addr()},
//	})
//	resp, err := p.ShouldRateLimit(ctx, "api", 1, sluicetest.D("user", "alice"))
//
// A package that uses it should remove the built binary when it is done,
// which Main does after the tests (and after any other cleanup given):
//
//	func TestMain(m *testing.M) { sluicetest.Main(m) }
//
// The package knows nothing of sluice's internals: it talks to the binary
// only through its command line, environment, gRPC and HTTP, as Envoy and
// an operator do.
package sluicetest

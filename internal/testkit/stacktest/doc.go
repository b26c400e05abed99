// Package stacktest builds sluice's in-process test stack: a parsed
// config, a backend (the memory backend on a clock the test moves, or one
// that fails every check), the requests to send, and a server.Server on
// 127.0.0.1 ports with a gRPC client connected to it.
//
// It does not import internal/service, so that the service package's own
// (internal) tests can use it as well as the tests of internal/metrics and
// test/reliability; callers build the Service themselves and hand it to
// Serve.
//
// A typical test:
//
//	clock := fakeclock.New(t0)
//	svc := service.New(service.Options{
//		Backend: stacktest.Memory(t, memory.Options{Now: clock.Now}),
//		Logger:  stacktest.QuietLogger(),
//	})
//	svc.SetConfig(stacktest.ParseConfig(t, yaml))
//	st := stacktest.Serve(t, svc)
//	resp, err := st.Client.ShouldRateLimit(ctx,
//		stacktest.Request("api", stacktest.Descriptor("user", "alice")))
package stacktest

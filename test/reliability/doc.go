// Package reliability holds sluice's proof-under-fire tests: hostile
// requests through the real gRPC server, faults injected into real
// redis-server processes while load runs (kill and restart, a cluster
// master killed, SCRIPT FLUSH, CLIENT PAUSE, a broken config directory),
// and the accuracy of every algorithm with three instances sharing a Redis
// Cluster under 150 concurrent clients.
//
// Every test runs sluice in-process (service, backend and gRPC server on
// 127.0.0.1 ports) so that it can count goroutines and read the heap, and
// starts its own redis-server processes through internal/testkit/redistest. Each
// test is bounded in time; docs/reliability.md lists what each one
// measured and how to rerun it.
//
// The package has no non-test code of its own: it knows sluice only
// through its public packages, as an operator's Envoy would through gRPC.
package reliability

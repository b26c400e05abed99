// Package integration holds black-box tests of the sluice binary against
// real Redis topologies: a standalone redis-server and a Redis Cluster of 3
// masters with one replica each (internal/testkit/redistest). Each test builds the
// binary once (internal/testkit/sluicetest), runs it as Envoy would see it, and
// talks to it over gRPC and HTTP only; Redis itself is inspected directly
// (INFO commandstats, INFO memory, KEYS) where a claim is about Redis.
//
// Every server listens on 127.0.0.1, every process is stopped by its PID,
// and every wait polls a real condition with a deadline.
//
// The Redis memory measurement behind docs/operations.md runs only with
// SLUICE_MEASURE=1 (see TestMeasureMemory).
package integration

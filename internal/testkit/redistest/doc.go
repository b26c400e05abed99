// Package redistest starts real redis-server processes for tests: a
// standalone server, a Redis Cluster (3 masters, one replica each) and a
// Sentinel set (one master, one replica, one sentinel).
//
// The server program is redis-server, or the one SLUICE_TEST_REDIS_SERVER
// names (valkey-server: the test command runs the Redis suites on both);
// the cli follows it (valkey-cli beside valkey-server) unless
// SLUICE_TEST_REDIS_CLI names another.
//
// Every process listens on 127.0.0.1 only, on a port chosen free at start
// (a start that loses the port to another process is retried on new ports),
// keeps its files in a temporary directory, persists nothing (save "",
// appendonly no), and is stopped by its own PID: SIGTERM, then SIGKILL after
// a deadline. Readiness is polled (PING, CLUSTER INFO, SENTINEL replies) with
// a deadline; nothing sleeps blindly.
//
// The testing.TB constructors (Standalone, Cluster, Sentinel) register the
// stop with t.Cleanup. When redis-server is not installed they fail the test
// with the command that installs it: a run without Redis must be asked for
// (SLUICE_TEST_REDIS=off skips the tests that need a missing redis-server),
// never happen by accident.
// The Start* functions return an error instead, for a TestMain that shares
// one cluster across a package; Shared wraps that pattern.
//
// On a cluster it also moves slots: MoveSlot takes the steps of
// `redis-cli --cluster reshard` one at a time for one slot (SETSLOT
// IMPORTING and MIGRATING, GETKEYSINSLOT and MIGRATE key by key with a
// callback between keys, SETSLOT NODE), reporting a refused step such as
// MIGRATE's BUSYKEY as a *MoveError; Reshard runs the real cli. And it
// reads MONITOR (StartMonitor): UndeclaredKeys finds the keys commands run
// by a script touched that the script call did not declare.
//
// The package knows nothing of sluice's key schema or scripts; it only runs
// Redis.
package redistest

// Package compat replays envoyproxy/ratelimit's own test expectations
// against the sluice binary: the incumbent's integration test scenario, its
// Envoy example flows (integration-test/scripts with examples/envoy's
// routes, including the token-quota flows), its service and config tests,
// and its server tests. The expectations were written anew from the facts
// those tests state; the config fixtures under testdata are data.
//
// Every case runs black-box (internal/testkit/sluicetest starts the built binary)
// on the embedded backend and on Redis (internal/testkit/redistest: standalone,
// cluster, Sentinel), under the settings variants the incumbent's tests
// use: local cache, cache key prefix, stop-increment, auth, TLS with and
// without a client certificate, cluster, Sentinel, per-second Redis,
// global shadow and quota mode, dynamic metadata, response headers and
// merged domains.
//
// Each expectation is the incumbent's answer. Where sluice answers
// differently on purpose, the case names the difference by its ID in the
// deviation table of docs/migrating-from-envoy-ratelimit.md and states
// sluice's answer; the case then passes on either answer, and fails on any
// other. TestDeviationsListed fails when a case names an ID the table does
// not list. Differences that are known but not yet fixed are marked in one
// place, pending in deviations_test.go. Decision 0046 explains the design.
package compat

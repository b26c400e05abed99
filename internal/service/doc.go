// Package service implements envoy.service.ratelimit.v3.RateLimitService:
// it validates a ShouldRateLimit request, matches each descriptor onto the
// current descriptor.Config, applies `replaces`, `unlimited`, request limit
// overrides and hits_addend, sends every resulting check to the backend in
// one Decide call, and builds the RateLimitResponse (statuses, overall code,
// response headers, dynamic metadata), applying the domain's failure mode
// when the backend cannot decide.
//
// It owns the mapping between Envoy's wire types and sluice's own
// (descriptor, limit, backend). It knows nothing of how state is stored
// (Redis, memory), how configuration is read or reloaded, or how the gRPC
// and HTTP servers are run: the server package wires a Service into them.
//
// Behaviour follows envoyproxy/ratelimit wherever sluice promises
// compatibility; docs/decisions/0006-service-deviations-from-reference.md
// lists the deliberate differences.
package service

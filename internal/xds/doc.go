// Package xds is sluice's xDS configuration source: a State-of-the-World
// client of go-control-plane's RateLimitConfig resources
// (type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig), as
// Envoy Gateway serves them to its rate-limit service and as
// envoyproxy/ratelimit reads them with CONFIG_TYPE=GRPC_XDS_SOTW.
//
// Client keeps one stream to the management server. Each response is
// compiled with Compile, which maps every resource onto the same
// source-neutral model the YAML files produce (descriptor.DomainSpec) and
// validates it with descriptor.Compile: one path from a domain's
// descriptors to the match tree. A response that compiles is applied and
// ACKed; one that does not is NACKed with every error, naming resource and
// field, and the configuration in use stays. When the stream fails the
// client keeps the configuration and opens a new stream after a backoff.
//
// Gate answers Unavailable until the first configuration is applied.
//
// The package knows nothing of the server, metrics or health: it reports
// through its Observer and the Apply function it is given.
package xds

// Package server runs sluice's network endpoints around a rate-limit
// service: the gRPC server (envoy.service.ratelimit.v3.RateLimitService,
// grpc.health.v1 health, server reflection, optional TLS and mTLS with
// certificates re-read from disk, connection-age limits, a request size
// bound) and the HTTP server (/healthcheck, /json, /rlconfig, plus any
// handler the caller mounts, such as /metrics). It shuts both down
// gracefully: health fails first so load balancers drain, then in-flight
// calls finish.
//
// It owns transport and lifecycle only. It does not know how a request is
// decided (the caller passes the service), how configuration is loaded or
// reloaded, or which backend is behind the service: the caller reports
// backend health through SetServing.
package server

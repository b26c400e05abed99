// Package descriptor reads rate-limit configuration (envoyproxy/ratelimit's
// YAML format, plus sluice's extensions), validates it with file and line in
// every error, compiles it into a match tree, and matches request descriptors
// against it.
//
// It knows nothing of backends, Redis or gRPC.
package descriptor

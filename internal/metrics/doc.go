// Package metrics exports sluice's Prometheus metrics: what the service
// decided (service.Observer), how long gRPC calls and backend calls took,
// backend errors by kind, configuration loads, the local denial cache and
// Redis pipeline batch sizes. docs/metrics.md lists every family.
//
// Everything is registered on a prometheus.Registerer the caller passes to
// New; the package never touches the global default registry, so tests and
// embedders can run several instances side by side.
//
// The hot path (Observer.Descriptor, Observer.Request, the backend
// decorator) does no per-call label formatting: label children are resolved
// once per domain, outcome, rule name and gRPC code and kept in
// copy-on-write maps that readers consult without locks or allocation.
//
// Cardinality is bounded by the configuration, never by request traffic:
// there is no label per descriptor value except on nodes that ask for it
// with detailed_metric or value_to_metric, and those are capped per domain
// (Options.MaxDetailedDescriptors); domains that are not configured are
// capped too (Options.MaxUnknownDomains). Past a cap, label values fold into
// OtherLabel.
//
// The package knows the service's events and the backend interface; it
// knows nothing of Redis, gRPC transport details beyond an interceptor, or
// how configuration is read.
package metrics

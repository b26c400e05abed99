package xdstest

// EnvoyGatewayEnv is the environment Envoy Gateway v1.9.0 sets on its
// envoy-ratelimit container (internal/infrastructure/kubernetes/ratelimit/
// resource.go, expectedRateLimitContainerEnv), with a Redis backend, Redis
// TLS with a client certificate, Prometheus metrics (its default) and
// tracing configured. TRACING_SERVICE_INSTANCE_ID comes from the pod name;
// REDIS_URL and OTEL_EXPORTER_OTLP_ENDPOINT from the EnvoyGateway config.
// Envoy Gateway's main branch of 2026-08-21 sets the same list. The same
// list is written down in docs/migrating-from-envoy-ratelimit.md and used by
// the tests that start sluice as Envoy Gateway would.
var EnvoyGatewayEnv = []string{
	"RUNTIME_ROOT=/data",
	"RUNTIME_SUBDIRECTORY=ratelimit",
	"RUNTIME_IGNOREDOTFILES=true",
	"RUNTIME_WATCH_ROOT=false",
	"LOG_LEVEL=info",
	"USE_STATSD=false",
	"CONFIG_TYPE=GRPC_XDS_SOTW",
	"CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001",
	"CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
	"GRPC_SERVER_USE_TLS=true",
	"GRPC_SERVER_TLS_CERT=/certs/tls.crt",
	"GRPC_SERVER_TLS_KEY=/certs/tls.key",
	"GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt",
	"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
	"REDIS_SOCKET_TYPE=tcp",
	"REDIS_URL=redis.redis-system.svc.cluster.local:6379",
	"REDIS_TLS=true",
	"REDIS_TLS_CLIENT_CERT=/redis-certs/tls.crt",
	"REDIS_TLS_CLIENT_KEY=/redis-certs/tls.key",
	"USE_PROMETHEUS=true",
	"PROMETHEUS_ADDR=:19001",
	"PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
	"TRACING_ENABLED=true",
	"TRACING_SERVICE_NAME=envoy-ratelimit",
	"TRACING_SERVICE_NAMESPACE=envoy-gateway-system",
	"TRACING_SERVICE_INSTANCE_ID=envoy-ratelimit-5d8f7c9b4-abcde",
	"TRACING_SAMPLING_RATE=1.0",
	"OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector.monitoring.svc.cluster.local:4318",
}

package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/denycache"
	"github.com/sluice-rl/sluice/internal/metrics"
	"github.com/sluice-rl/sluice/internal/server"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// defaultStreamWorkers is how many goroutines serve gRPC calls for good
// (grpc.NumStreamWorkers). A goroutine per call grows its stack on every
// call (runtime.copystack was 16% of sluice's CPU under load, 3.5% with
// workers); 256 covers the calls in flight of a busy instance, and calls
// beyond it still get a goroutine each (docs/benchmarks.md).
const defaultStreamWorkers = 256

// defaultGCHeapFloor is the least heap goal of the garbage collector
// (internal/heapfloor): at GOGC=100 a live heap of about 10 MB was
// collected some 17 times a second under load, a tenth of the service's
// CPU with the stack regrowth each cycle causes; 64 MiB lets it run a few
// times a second for at most 64 MiB more memory.
const defaultGCHeapFloor = 64 << 20

// minPollInterval is the shortest interval at which sluice may poll its
// config for changes or its backend for health.
const minPollInterval = 10 * time.Millisecond

// settings are everything `sluice serve` reads from flags and environment.
type settings struct {
	GRPCHost string
	GRPCPort int
	GRPCUDS  string
	HTTPHost string
	HTTPPort int
	// Listener bounds the HTTP listener and says who may reach decisions.
	Listener listenerSettings

	RuntimeRoot, RuntimeSubdirectory, RuntimeAppDirectory string
	RuntimeIgnoreDotFiles, RuntimeWatchRoot               bool
	// DotFiles reads the config directory's dot-files: set by an explicit
	// RUNTIME_IGNOREDOTFILES=false, the incumbent's default.
	DotFiles         bool
	Configs          stringList
	MergeDomains     bool
	AllowEmptyReload bool
	ReloadInterval   time.Duration
	// ConfigSource says whether the configuration comes from files or
	// over xDS (xds.go).
	ConfigSource configSettings

	LogLevel  logrus.Level
	LogFormat string

	ShadowMode, QuotaMode                     bool
	AllOrNothing                              bool
	ChargeOverLimit                           service.Charging
	OverrideUnitMultiplier                    bool
	HeadersEnabled                            bool
	LimitHeader, RemainingHeader, ResetHeader string
	IETFHeaders, RetryAfter                   bool
	// RequestHeaders adds the Limit, Remaining and Reset values to the
	// request Envoy forwards (LIMIT_REQUEST_HEADERS_ENABLED), under the
	// names RequestLimitHeader, RequestRemainingHeader, RequestResetHeader.
	RequestHeaders                                                 bool
	RequestLimitHeader, RequestRemainingHeader, RequestResetHeader string
	DynamicMetadata                                                bool
	ResetMillis                                                    bool
	LocalInstances                                                 int
	MemoryMaxDescriptors                                           int

	BackendType string // "", "memory" or "redis"
	// Redis is the Redis backend's options: the REDIS_* flags write into
	// its fields directly, with the meaning the fields document (0 is the
	// field's default), and are validated by pkg/backend/redis's Check
	// functions. Wiring fills the rest (logger, batch observer).
	Redis redis.Options

	GRPCUseTLS                              bool
	GRPCTLSCert, GRPCTLSKey                 string
	GRPCClientCACert, GRPCClientTLSSAN      string
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	MaxRequestBytes                         int
	// MaxDescriptors is the most descriptors per request, MaxRequestRules
	// the most rules they may ask to decide; 0 means no bound (the
	// incumbent's behaviour) but MaxRequestBytes.
	MaxDescriptors, MaxRequestRules int

	HealthInterval    time.Duration
	HealthyWithConfig bool
	// HealthFollowsBackend makes health fail whenever a backend ping
	// fails, not only until the first ping works.
	HealthFollowsBackend bool
	DrainDelay           time.Duration
	DebugAddr            string
	Admin                adminSettings
	LocalCache           bool
	LocalCacheSize       int
	StreamWorkers        int
	GCHeapFloor          int
	StaticWindows        bool
	ShutdownTimeout      time.Duration

	// LocalCacheMaxAge bounds how long a denial is answered locally.
	LocalCacheMaxAge time.Duration
	// RLQS configures the Rate Limit Quota Service (rlqs.go).
	RLQS rlqsSettings

	Metrics        bool
	NearLimitRatio float64
	DetailedValues string // raw, hash, truncate
	// PrometheusAddr and PrometheusPath, when USE_PROMETHEUS=true, are a
	// second place metrics are served (the reference's listener).
	PrometheusAddr, PrometheusPath string

	Tracing                                           bool
	TracingServiceName                                string
	TracingServiceNamespace, TracingServiceInstanceID string
	TracingProtocol                                   string
	TracingSamplingRate                               float64

	// checks validate fields with the rule of the package that owns them,
	// each naming its flag (see check in serveFlags).
	checks []fieldCheck
	// source maps a flag name to where its value came from ("--grpc-port"
	// or "GRPC_PORT"), so errors name what the operator wrote.
	source map[string]string
	// ignored lists the set envoyproxy/ratelimit variables sluice does not
	// implement.
	ignored []string
	// redisSet names the Redis settings given (flags as --name, variables
	// by name), which show that Redis was meant.
	redisSet []string
	// warnings are lines logged as warnings at start.
	warnings []string
	// notes are informational lines for the log (accepted-but-moot
	// variables).
	notes []string
}

// fieldCheck is one field's validator, bound to the flag that sets it.
type fieldCheck struct {
	flag  string
	check func() error
}

// configPaths are the paths the configuration is loaded from: --config if
// given, else RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
func (s *settings) configPaths() []string {
	if len(s.Configs) > 0 {
		return s.Configs
	}
	return []string{filepath.Join(s.RuntimeRoot, s.RuntimeSubdirectory, s.RuntimeAppDirectory)}
}

// backend returns the backend to build: BACKEND_TYPE, or redis when
// REDIS_URL is set and memory otherwise.
func (s *settings) backend() string {
	if s.BackendType != "" {
		return s.BackendType
	}
	if s.Redis.URL != "" {
		return "redis"
	}
	return "memory"
}

// envName pairs a flag with the environment variable that sets it when the
// flag is not given.
type envName struct{ flag, env string }

// serveFlags defines serve's flags on fs, with their defaults, writing
// into s. It returns each flag's environment variable, in definition order.
func serveFlags(fs *flag.FlagSet, s *settings) []envName {
	var names []envName
	bind := func(name, env string) string {
		names = append(names, envName{name, env})
		return " (env " + env + ")"
	}
	str := func(p *string, name, env, def, usage string) { fs.StringVar(p, name, def, usage+bind(name, env)) }
	boolean := func(p *bool, name, env string, def bool, usage string) {
		fs.BoolVar(p, name, def, usage+bind(name, env))
	}
	integer := func(p *int, name, env string, def int, usage string) { fs.IntVar(p, name, def, usage+bind(name, env)) }
	duration := func(p *time.Duration, name, env string, def time.Duration, usage string) {
		fs.DurationVar(p, name, def, usage+bind(name, env))
	}
	float := func(p *float64, name, env string, def float64, usage string) {
		fs.Float64Var(p, name, def, usage+bind(name, env))
	}
	// check makes f, the owning package's validator, judge the flag's
	// final value (default, environment or flag).
	check := func(name string, f func() error) { s.checks = append(s.checks, fieldCheck{name, f}) }
	choice := func(p *string, name, env, def string, allowed []string, usage string) {
		*p = def
		fs.Var(&choiceValue{p: p, allowed: allowed}, name, usage+" ("+strings.Join(allowed, "|")+")"+bind(name, env))
	}

	listenerFlags(fs, bind, &s.Listener)
	str(&s.GRPCHost, "grpc-host", "GRPC_HOST", "0.0.0.0", "gRPC listen host")
	integer(&s.GRPCPort, "grpc-port", "GRPC_PORT", 8081, "gRPC listen port")
	str(&s.GRPCUDS, "grpc-uds", "GRPC_UDS", "", "unix socket path gRPC listens on instead of GRPC_HOST:GRPC_PORT")
	str(&s.HTTPHost, "host", "HOST", "0.0.0.0", "HTTP listen host (/healthcheck, /json, /metrics; /rlconfig is on the admin listener)")
	integer(&s.HTTPPort, "port", "PORT", 8080, "HTTP listen port")

	fs.Var(&s.Configs, "config", "config file or directory; repeatable; overrides the RUNTIME_* directory"+
		bind("config", "SLUICE_CONFIG")+", comma-separated")
	str(&s.RuntimeRoot, "runtime-root", "RUNTIME_ROOT", "/srv/runtime_data/current", "config root directory")
	str(&s.RuntimeSubdirectory, "runtime-subdirectory", "RUNTIME_SUBDIRECTORY", "", "config subdirectory of the root")
	str(&s.RuntimeAppDirectory, "runtime-appdirectory", "RUNTIME_APPDIRECTORY", "config", "config directory inside the subdirectory")
	boolean(&s.RuntimeIgnoreDotFiles, "runtime-ignoredotfiles", "RUNTIME_IGNOREDOTFILES", false,
		"set to false explicitly to read the config directory's dot-files as envoyproxy/ratelimit does by default (Kubernetes' '..' entries excepted); unset or true, sluice skips them")
	boolean(&s.RuntimeWatchRoot, "runtime-watch-root", "RUNTIME_WATCH_ROOT", true,
		"accepted for compatibility: polling sees changes in either layout")
	boolean(&s.MergeDomains, "merge-domain-config", "MERGE_DOMAIN_CONFIG", false, "allow several files to define one domain")
	duration(&s.ReloadInterval, "reload-interval", "SLUICE_RELOAD_INTERVAL", time.Second, "how often to poll the config for changes")
	boolean(&s.AllowEmptyReload, "allow-empty-reload", "SLUICE_ALLOW_EMPTY_RELOAD", false, "apply a reload that leaves no domain (by default it is refused and the last config kept)")

	s.LogLevel = logrus.InfoLevel
	fs.Var(&levelValue{&s.LogLevel}, "log-level", "log level: debug, info, warn, error"+bind("log-level", "LOG_LEVEL"))
	str(&s.LogFormat, "log-format", "LOG_FORMAT", "text", "log format: text or json (any other value logs text, as envoyproxy/ratelimit does)")

	boolean(&s.ShadowMode, "shadow-mode", "SHADOW_MODE", false, "report OVER_LIMIT decisions as OK (statuses keep OVER_LIMIT)")
	boolean(&s.QuotaMode, "quota-mode", "QUOTA_MODE", false, "treat every descriptor as a quota descriptor")
	boolean(&s.AllOrNothing, "stop-cache-key-increment-when-overlimit", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false,
		"charge none of a request's descriptors when any of them is over the limit")
	boolean(&s.OverrideUnitMultiplier, "override-unit-multiplier", "SLUICE_OVERRIDE_UNIT_MULTIPLIER", true,
		"honour a request limit override's unit_multiplier; false ignores it (the period is one unit), as envoyproxy/ratelimit does")
	fs.Var(chargingValue{&s.ChargeOverLimit}, "charge-over-limit",
		"charge costs that do not fit on descriptors without charge_over_limit: true every cost, false none "+
			"(but quota_mode's); unset, a descriptor's own hits_addend (check-then-debit quotas)"+
			bind("charge-over-limit", "SLUICE_CHARGE_OVER_LIMIT"))
	boolean(&s.HeadersEnabled, "limit-response-headers", "LIMIT_RESPONSE_HEADERS_ENABLED", false, "add rate-limit response headers")
	str(&s.LimitHeader, "limit-header", "LIMIT_LIMIT_HEADER", "RateLimit-Limit", "name of the limit header")
	str(&s.RemainingHeader, "remaining-header", "LIMIT_REMAINING_HEADER", "RateLimit-Remaining", "name of the remaining header")
	str(&s.ResetHeader, "reset-header", "LIMIT_RESET_HEADER", "RateLimit-Reset", "name of the reset header")
	boolean(&s.RequestHeaders, "limit-request-headers", "LIMIT_REQUEST_HEADERS_ENABLED", false,
		"add the limit, remaining and reset values to the request Envoy forwards upstream (request_headers_to_add), on OK and OVER_LIMIT answers alike")
	str(&s.RequestLimitHeader, "request-limit-header", "LIMIT_REQUEST_LIMIT_HEADER", "RateLimit-Limit", "name of the limit request header")
	str(&s.RequestRemainingHeader, "request-remaining-header", "LIMIT_REQUEST_REMAINING_HEADER", "RateLimit-Remaining", "name of the remaining request header")
	str(&s.RequestResetHeader, "request-reset-header", "LIMIT_REQUEST_RESET_HEADER", "RateLimit-Reset", "name of the reset request header")
	boolean(&s.IETFHeaders, "ietf-headers", "SLUICE_IETF_HEADERS", false, "also add the IETF draft RateLimit and RateLimit-Policy headers")
	boolean(&s.RetryAfter, "retry-after", "SLUICE_RETRY_AFTER", false, "also add Retry-After when over the limit")
	boolean(&s.DynamicMetadata, "response-dynamic-metadata", "RESPONSE_DYNAMIC_METADATA", false, "fill the response's dynamic_metadata")
	boolean(&s.ResetMillis, "reset-milliseconds", "SLUICE_RESET_MILLISECONDS", false,
		"send duration_until_reset to the millisecond instead of whole seconds rounded up (Envoy's x-ratelimit-reset drops the fraction)")
	integer(&s.MemoryMaxDescriptors, "memory-max-descriptors", "SLUICE_MEMORY_MAX_DESCRIPTORS", memory.DefaultMaxDescriptors,
		"most descriptors the embedded backend (and failure_mode local) holds; the least recently used are evicted beyond it")
	integer(&s.LocalInstances, "local-instances", "SLUICE_LOCAL_INSTANCES", 1,
		"instance count dividing each limit when failure_mode local decides in memory")

	choice(&s.BackendType, "backend", "BACKEND_TYPE", "", []string{"memory", "redis"},
		"backend; default redis when REDIS_URL is set, memory otherwise")
	r := &s.Redis
	str(&r.URL, "redis-url", "REDIS_URL", "", "single: host:port or socket path; sentinel: master,host:port,...; cluster: host:port,...")
	str(&r.Type, "redis-type", "REDIS_TYPE", redis.TypeSingle, "Redis deployment: single, sentinel or cluster")
	check("redis-type", func() error { return redis.CheckType(r.Type) })
	str(&r.SocketType, "redis-socket-type", "REDIS_SOCKET_TYPE", "",
		"Redis socket, tcp or unix; default inferred from REDIS_URL (a path is a unix socket)")
	check("redis-socket-type", func() error { return redis.CheckSocketType(r.SocketType) })
	str(&r.Auth, "redis-auth", "REDIS_AUTH", "", "Redis password, or user:password")
	str(&r.SentinelAuth, "redis-sentinel-auth", "REDIS_SENTINEL_AUTH", "", "Sentinel password, or user:password")
	boolean(&r.TLS, "redis-tls", "REDIS_TLS", false, "connect to Redis over TLS")
	str(&r.TLSCACert, "redis-tls-cacert", "REDIS_TLS_CACERT", "", "CA certificate file for Redis TLS")
	str(&r.TLSClientCert, "redis-tls-client-cert", "REDIS_TLS_CLIENT_CERT", "", "client certificate file for Redis TLS")
	str(&r.TLSClientKey, "redis-tls-client-key", "REDIS_TLS_CLIENT_KEY", "", "client key file for Redis TLS")
	check("redis-tls-client-cert", func() error { return redis.CheckTLSClientPair(r.TLSClientCert, r.TLSClientKey) })
	boolean(&r.TLSSkipHostnameVerification, "redis-tls-skip-hostname-verification", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false,
		"verify the Redis certificate chain but not its host name")
	integer(&r.PoolSize, "redis-pool-size", "REDIS_POOL_SIZE", 10, "Redis connections per node; 0 means go-redis's default, 10 per CPU")
	check("redis-pool-size", func() error { return redis.CheckPoolSize(r.PoolSize) })
	duration(&r.Timeout, "redis-timeout", "REDIS_TIMEOUT", redis.DefaultTimeout,
		fmt.Sprintf("bound on every Redis round trip; 0 means %v (the reference's default is 10s; see pkg/backend/redis)", redis.DefaultTimeout))
	check("redis-timeout", func() error { return redis.CheckTimeout(r.Timeout) })
	str(&r.KeyPrefix, "cache-key-prefix", "CACHE_KEY_PREFIX", "", "prefix of every Redis key")
	check("cache-key-prefix", func() error { return redis.CheckKeyPrefix(r.KeyPrefix) })
	fs.Var(invertedBool{&r.DisableCoalescing}, "redis-coalesce",
		"let concurrent requests bound for one Redis node share pipelines (default true)"+bind("redis-coalesce", "SLUICE_REDIS_COALESCE"))
	fs.Var(invertedBool{&r.DisableMerging}, "redis-merge",
		"merge the script calls of concurrent requests that share a pipeline into one call (default true)"+bind("redis-merge", "SLUICE_REDIS_MERGE"))
	boolean(&r.Functions, "redis-functions", "SLUICE_REDIS_FUNCTIONS", true,
		"call the decide script as a Redis function (FUNCTION LOAD once per master, FCALL per call; Redis 7+) instead of EVALSHA; falls back to EVALSHA with a warning where Redis refuses")
	duration(&r.PipelineWindow, "redis-pipeline-window", "REDIS_PIPELINE_WINDOW", 0,
		"how long a coalesced pipeline waits for more calls; 0 sends at once and batches what arrives meanwhile")
	check("redis-pipeline-window", func() error { return redis.CheckPipelineWindow(r.PipelineWindow) })
	integer(&r.PipelineLimit, "redis-pipeline-limit", "REDIS_PIPELINE_LIMIT", redis.DefaultPipelineLimit,
		fmt.Sprintf("most commands per coalesced pipeline; 0 means %d", redis.DefaultPipelineLimit))
	check("redis-pipeline-limit", func() error { return redis.CheckPipelineLimit(r.PipelineLimit) })
	integer(&r.WaitReplicas, "redis-wait-replicas", "SLUICE_REDIS_WAIT_REPLICAS", 0,
		"strict mode for failovers: after each pipeline of decisions, WAIT for this many replicas to acknowledge them, and fail the decisions (per failure_mode) when fewer do in time; 0 = do not wait (a failover forgets what the replica had not received)")
	duration(&r.WaitTimeout, "redis-wait-timeout", "SLUICE_REDIS_WAIT_TIMEOUT", redis.DefaultWaitTimeout,
		fmt.Sprintf("how long the strict mode's WAIT waits for the replicas; 0 means %v; must be below REDIS_TIMEOUT", redis.DefaultWaitTimeout))
	check("redis-wait-replicas", func() error {
		timeout := r.Timeout
		if timeout == 0 {
			timeout = redis.DefaultTimeout
		}
		return redis.CheckWait(r.WaitReplicas, r.WaitTimeout, timeout)
	})
	integer(&r.Breaker.Failures, "redis-breaker-failures", "SLUICE_REDIS_BREAKER_FAILURES", redis.DefaultBreakerFailures,
		fmt.Sprintf("consecutive failed round trips to a Redis node that open its circuit breaker; 0 means %d, a negative count disables the breakers",
			redis.DefaultBreakerFailures))
	duration(&r.Breaker.OpenFor, "redis-breaker-open", "SLUICE_REDIS_BREAKER_OPEN", redis.DefaultBreakerOpenFor,
		fmt.Sprintf("how long an open breaker fails its node's calls at once before one probe tries the node again; 0 means %v",
			redis.DefaultBreakerOpenFor))
	check("redis-breaker-open", func() error { return redis.CheckBreakerOpenFor(r.Breaker.OpenFor) })

	boolean(&s.GRPCUseTLS, "grpc-tls", "GRPC_SERVER_USE_TLS", false, "serve gRPC over TLS")
	str(&s.GRPCTLSCert, "grpc-tls-cert", "GRPC_SERVER_TLS_CERT", "", "gRPC server certificate file (re-read when it changes)")
	str(&s.GRPCTLSKey, "grpc-tls-key", "GRPC_SERVER_TLS_KEY", "", "gRPC server key file")
	str(&s.GRPCClientCACert, "grpc-client-tls-cacert", "GRPC_CLIENT_TLS_CACERT", "", "CA file; when set, clients must present a certificate it signed")
	str(&s.GRPCClientTLSSAN, "grpc-client-tls-san", "GRPC_CLIENT_TLS_SAN", "", "SAN the client certificate must carry")
	duration(&s.MaxConnectionAge, "grpc-max-connection-age", "GRPC_MAX_CONNECTION_AGE", 24*time.Hour, "close gRPC connections after this age")
	duration(&s.MaxConnectionAgeGrace, "grpc-max-connection-age-grace", "GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour,
		"time for in-flight calls after the connection age")
	integer(&s.MaxRequestBytes, "max-request-bytes", "SLUICE_MAX_REQUEST_BYTES", server.DefaultMaxRequestBytes, "bound on a gRPC request and a /json body")
	integer(&s.MaxDescriptors, "max-descriptors", "SLUICE_MAX_DESCRIPTORS", service.DefaultMaxDescriptors,
		"most descriptors in one rate-limit request (0: no bound but the request's size)")
	integer(&s.MaxRequestRules, "max-request-rules", "SLUICE_MAX_REQUEST_RULES", service.DefaultMaxRequestRules,
		"most the rules the descriptors of one request ask to decide may weigh: 1 per rule, 64 per sliding log (0: no bound)")

	duration(&s.HealthInterval, "health-interval", "SLUICE_HEALTH_INTERVAL", 5*time.Second, "how often to ping the backend for health")
	boolean(&s.HealthyWithConfig, "healthy-with-at-least-one-config-loaded", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false,
		"fail health while the config has no domain")
	boolean(&s.HealthFollowsBackend, "health-follows-backend", "SLUICE_HEALTH_FOLLOWS_BACKEND", false,
		"fail health whenever the backend ping fails (and some domain's failure_mode is error or deny), not only until the backend first answers; also set by REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true")
	boolean(&s.LocalCache, "local-cache", "SLUICE_LOCAL_CACHE", true, "answer known Redis denials in process until they end (no round trip)")
	integer(&s.LocalCacheSize, "local-cache-size", "SLUICE_LOCAL_CACHE_SIZE", 10000, "most descriptors the local denial cache holds")
	duration(&s.LocalCacheMaxAge, "local-cache-max-age", "SLUICE_LOCAL_CACHE_MAX_AGE", denycache.DefaultMaxAge,
		"most time a denial is answered locally before Redis is asked again (bounds a missed refund announcement)")
	boolean(&s.StaticWindows, "grpc-static-windows", "SLUICE_GRPC_STATIC_WINDOWS", true,
		"fixed HTTP/2 flow-control windows for gRPC (a request's bound per call), so the server sends no bandwidth-estimation pings; false = gRPC's dynamic windows")
	integer(&s.StreamWorkers, "grpc-stream-workers", "SLUICE_GRPC_STREAM_WORKERS", defaultStreamWorkers, "gRPC calls served by a pool of this many long-lived goroutines instead of one new goroutine each (saves stack growth; calls beyond it get their own goroutine); 0 = a new goroutine for every call")
	integer(&s.GCHeapFloor, "gc-heap-floor-bytes", "SLUICE_GC_HEAP_FLOOR_BYTES", defaultGCHeapFloor,
		"the garbage collector lets a smaller heap grow to this many bytes before it collects (GOGC still applies above it; the memory it costs is at most this); 0 = GOGC alone")
	adminFlags(str, integer, &s.Admin)
	rlqsFlags(boolean, duration, &s.RLQS)
	str(&s.DebugAddr, "debug-addr", "SLUICE_DEBUG_ADDR", "", "deprecated: the admin listener's address, when --admin-addr keeps its default")
	duration(&s.DrainDelay, "drain-delay", "SLUICE_DRAIN_DELAY", 0, "at shutdown, fail health this long before closing listeners")
	duration(&s.ShutdownTimeout, "shutdown-timeout", "SLUICE_SHUTDOWN_TIMEOUT", 10*time.Second, "at shutdown, wait this long for in-flight calls")

	boolean(&s.Metrics, "metrics", "SLUICE_METRICS", true, "serve Prometheus metrics at /metrics on the HTTP port (docs/metrics.md)")
	float(&s.NearLimitRatio, "near-limit-ratio", "NEAR_LIMIT_RATIO", metrics.DefaultNearLimitRatio,
		"share of a limit used above which an admitted descriptor counts as near the limit (metrics only)")
	choice(&s.DetailedValues, "detailed-metric-values", "SLUICE_DETAILED_METRIC_VALUES", "raw", []string{"raw", "hash", "truncate"},
		"how request values appear in the descriptor label of detailed_metric and value_to_metric nodes on /metrics: as sent (raw, the incumbent's), as 'h:' and 16 hex digits of their SHA-256, or their first 4 bytes and '…'")
	boolean(&s.Tracing, "tracing", "TRACING_ENABLED", false,
		"export OpenTelemetry traces over OTLP, configured by the OTEL_* variables (docs/decisions/0009)")
	str(&s.TracingServiceName, "tracing-service-name", "TRACING_SERVICE_NAME", tracing.DefaultServiceName,
		"service.name of the spans (OTEL_SERVICE_NAME wins)")
	str(&s.TracingServiceNamespace, "tracing-service-namespace", "TRACING_SERVICE_NAMESPACE", "",
		"service.namespace of the spans (OTEL_RESOURCE_ATTRIBUTES wins)")
	str(&s.TracingServiceInstanceID, "tracing-service-instance-id", "TRACING_SERVICE_INSTANCE_ID", "",
		"service.instance.id of the spans (OTEL_RESOURCE_ATTRIBUTES wins)")
	choice(&s.TracingProtocol, "tracing-protocol", "TRACING_EXPORTER_PROTOCOL", "", []string{"grpc", "http", "http/protobuf"},
		"OTLP protocol when OTEL_EXPORTER_OTLP_PROTOCOL is unset; default http/protobuf")
	float(&s.TracingSamplingRate, "tracing-sampling-rate", "TRACING_SAMPLING_RATE", 1,
		"share of new traces sampled, 0 to 1, when OTEL_TRACES_SAMPLER is unset; a sampled caller is always followed")
	names = append(names, configFlags(fs, &s.ConfigSource)...)
	return names
}

// parseServe parses serve's settings: flags win over environment variables,
// which win over defaults. Errors name the flag or variable at fault, and
// are the caller's to print. --help prints the usage to usage and returns
// flag.ErrHelp.
func parseServe(args, environ []string, usage io.Writer) (*settings, error) {
	s := &settings{source: map[string]string{}}
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	names := serveFlags(fs, s)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sluice serve [flags]\n\nEvery flag can also be set by the environment variable shown; flags win.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, usage); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	env := envMap(environ)
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		given[f.Name] = true
		s.source[f.Name] = "--" + f.Name
	})
	for _, n := range names {
		if given[n.flag] {
			continue
		}
		s.source[n.flag] = n.env
		v, ok := env[n.env]
		if !ok || v == "" {
			continue
		}
		if n.flag == "config" {
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" {
					s.Configs = append(s.Configs, p)
				}
			}
			continue
		}
		if err := fs.Set(n.flag, v); err != nil {
			return nil, fmt.Errorf("invalid %s=%q: %w", n.env, v, explainSetError(fs.Lookup(n.flag), err))
		}
	}
	s.redisSet = redisSettingsSet(names, given, env)
	if err := s.referenceNewer(env, given); err != nil {
		return nil, err
	}
	if err := s.validate(env); err != nil {
		return nil, err
	}
	if err := s.referenceListeners(env); err != nil {
		return nil, err
	}
	if err := s.referenceHealth(env, given["health-follows-backend"]); err != nil {
		return nil, err
	}
	s.ignored = ignoredReferenceVars(env)
	if unknown := unknownSluiceVars(env, names); len(unknown) > 0 {
		s.warnings = append(s.warnings, "not sluice settings, ignored (a typo? `sluice serve --help` lists every setting): "+strings.Join(unknown, ", "))
	}
	if s.BackendType == "memory" && len(s.redisSet) > 0 {
		s.warnings = append(s.warnings, "BACKEND_TYPE=memory: limits are per instance and these Redis settings are unused: "+
			strings.Join(s.redisSet, ", "))
	}
	if w := s.runtimeOverridden(env, given); w != "" {
		s.warnings = append(s.warnings, w)
	}
	if s.GRPCUDS != "" {
		s.notes = append(s.notes, s.source["grpc-uds"]+" is set: gRPC listens on the unix socket "+s.GRPCUDS+" only, not on GRPC_HOST:GRPC_PORT")
	}
	if _, ok := env["RUNTIME_IGNOREDOTFILES"]; ok || given["runtime-ignoredotfiles"] {
		s.DotFiles = !s.RuntimeIgnoreDotFiles
		if s.DotFiles {
			s.notes = append(s.notes, s.source["runtime-ignoredotfiles"]+": the config directory's names starting with '.' are read, as envoyproxy/ratelimit reads them (Kubernetes' '..' entries excepted)")
		} else {
			s.notes = append(s.notes, s.source["runtime-ignoredotfiles"]+": names starting with '.' are skipped, as sluice does by default")
		}
	}
	return s, nil
}

// validate checks what the flag types cannot.
func (s *settings) validate(env map[string]string) error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("invalid %s: %s", s.source[flag], fmt.Sprintf(format, args...)))
	}
	for _, p := range []struct {
		flag string
		v    int
	}{{"grpc-port", s.GRPCPort}, {"port", s.HTTPPort}} {
		if p.v < 0 || p.v > 65535 {
			bad(p.flag, "port %d out of range 0-65535", p.v)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"grpc-max-connection-age", s.MaxConnectionAge}, {"grpc-max-connection-age-grace", s.MaxConnectionAgeGrace},
		{"drain-delay", s.DrainDelay},
	} {
		if d.v < 0 {
			bad(d.flag, "negative duration %v", d.v)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"reload-interval", s.ReloadInterval}, {"health-interval", s.HealthInterval}} {
		if d.v < minPollInterval {
			bad(d.flag, "%v: at least %v (it is how often sluice polls; shorter, polling becomes a busy loop)", d.v, minPollInterval)
		}
	}
	if s.ShutdownTimeout <= 0 {
		bad("shutdown-timeout", "duration %v must be positive", s.ShutdownTimeout)
	}
	if s.MemoryMaxDescriptors < 1 {
		bad("memory-max-descriptors", "%d: must be at least 1", s.MemoryMaxDescriptors)
	}
	if s.LocalInstances < 1 {
		bad("local-instances", "%d: must be at least 1", s.LocalInstances)
	}
	switch f := strings.ToLower(s.LogFormat); f {
	case "json", "text":
		s.LogFormat = f
	default:
		s.warnings = append(s.warnings, fmt.Sprintf("%s=%q is neither text nor json: logging text, as envoyproxy/ratelimit does", s.source["log-format"], s.LogFormat))
		s.LogFormat = "text"
	}
	if s.NearLimitRatio < 0 {
		// The incumbent accepts any number; below 0 it counts every
		// admitted descriptor as near, as 0 does. Metrics only.
		s.warnings = append(s.warnings, fmt.Sprintf("%s=%v is below 0: taken as 0 (every admitted descriptor counts as near its limit)",
			s.source["near-limit-ratio"], s.NearLimitRatio))
		s.NearLimitRatio = 0
	}
	if s.TracingSamplingRate < 0 || s.TracingSamplingRate > 1 {
		bad("tracing-sampling-rate", "%v: must be from 0 to 1", s.TracingSamplingRate)
	}
	if s.StreamWorkers < 0 || s.StreamWorkers > 1<<16 {
		bad("grpc-stream-workers", "%d: must be from 0 to 65536", s.StreamWorkers)
	}
	if s.Admin.TopMaxBytes < 1<<20 || s.Admin.TopMaxBytes > 1<<40 {
		bad("admin-top-max-bytes", "%d: must be from 1048576 (1 MiB) to 1099511627776 (1 TiB)", s.Admin.TopMaxBytes)
	}
	if s.GCHeapFloor < 0 || s.GCHeapFloor > 1<<40 {
		bad("gc-heap-floor-bytes", "%d: must be from 0 to 1099511627776 (1 TiB)", s.GCHeapFloor)
	}
	if s.LocalCacheMaxAge <= 0 {
		bad("local-cache-max-age", "duration %v must be positive", s.LocalCacheMaxAge)
	}
	if s.LocalCacheSize < 1 {
		bad("local-cache-size", "%d: must be at least 1", s.LocalCacheSize)
	}
	for _, c := range s.checks {
		if err := c.check(); err != nil {
			bad(c.flag, "%v", err)
		}
	}
	if s.MaxRequestBytes < 1024 || s.MaxRequestBytes > math.MaxInt32 {
		bad("max-request-bytes", "%d: must be at least 1024 and at most %d", s.MaxRequestBytes, math.MaxInt32)
	}
	if s.MaxDescriptors < 0 {
		bad("max-descriptors", "%d: must be 0 (no bound) or more", s.MaxDescriptors)
	}
	if s.MaxRequestRules < 0 {
		bad("max-request-rules", "%d: must be 0 (no bound) or more", s.MaxRequestRules)
	}
	if s.backend() == "redis" && s.Redis.URL == "" {
		bad("backend", "redis needs REDIS_URL (--redis-url)")
	}
	if s.BackendType == "" && s.Redis.URL == "" && len(s.redisSet) > 0 {
		// The reference defaults to Redis; running embedded, with limits
		// per instance, when the operator configured Redis would fail open
		// in silence.
		errs = append(errs, fmt.Errorf("%s %s set but REDIS_URL is not: sluice will not fall back to the embedded backend "+
			"(limits per instance) when Redis was configured; set REDIS_URL (--redis-url), or BACKEND_TYPE=memory to run embedded on purpose",
			strings.Join(s.redisSet, ", "), plural(len(s.redisSet), "is", "are")))
	}
	if s.GRPCUseTLS && (s.GRPCTLSCert == "" || s.GRPCTLSKey == "") {
		bad("grpc-tls", "TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	if !s.GRPCUseTLS && (s.GRPCClientCACert != "" || s.GRPCClientTLSSAN != "") {
		// The incumbent reads them only with TLS on, and ignores them
		// otherwise: so does sluice, saying so.
		var set []string
		for _, f := range []struct{ flag, v string }{{"grpc-client-tls-cacert", s.GRPCClientCACert}, {"grpc-client-tls-san", s.GRPCClientTLSSAN}} {
			if f.v != "" {
				set = append(set, s.source[f.flag])
			}
		}
		s.warnings = append(s.warnings, fmt.Sprintf("%s ignored: gRPC is plain (GRPC_SERVER_USE_TLS is not true), so no client certificate is asked for, as envoyproxy/ratelimit ignores them without TLS",
			strings.Join(set, " and ")))
		s.GRPCClientCACert, s.GRPCClientTLSSAN = "", ""
	}
	if s.GRPCClientTLSSAN != "" && s.GRPCClientCACert == "" {
		bad("grpc-client-tls-san", "a client SAN needs GRPC_CLIENT_TLS_CACERT")
	}
	if (s.IETFHeaders || s.RetryAfter) && !s.HeadersEnabled {
		flag := "ietf-headers"
		if !s.IETFHeaders {
			flag = "retry-after"
		}
		bad(flag, "needs LIMIT_RESPONSE_HEADERS_ENABLED=true")
	}
	s.validateListener(bad)
	notes, err := s.validateConfigSource(env)
	errs = append(errs, err)
	s.notes = append(s.notes, notes...)
	return errors.Join(errs...)
}

// referenceListeners honours the reference's metrics listener, which has
// no flag of its own: USE_PROMETHEUS=true serves metrics at
// PROMETHEUS_ADDR (default :9090) under PROMETHEUS_PATH (default
// /metrics), as well as at /metrics of the HTTP port. Ignoring it would
// move where scrapers find sluice.
func (s *settings) referenceListeners(env map[string]string) error {
	var errs []error
	if on, set, err := referenceBool(env, "USE_PROMETHEUS"); set {
		switch {
		case err != nil:
			errs = append(errs, err)
		case on && !s.Metrics:
			errs = append(errs, fmt.Errorf("USE_PROMETHEUS=true asks for metrics, but %s=false turns them off", s.source["metrics"]))
		case on:
			s.PrometheusAddr = cmp.Or(env["PROMETHEUS_ADDR"], ":9090")
			s.PrometheusPath = cmp.Or(env["PROMETHEUS_PATH"], "/metrics")
			if !strings.HasPrefix(s.PrometheusPath, "/") {
				errs = append(errs, fmt.Errorf("invalid PROMETHEUS_PATH=%q: must start with /", s.PrometheusPath))
			}
			if env["PROMETHEUS_MAPPER_YAML"] != "" {
				// Envoy Gateway mounts the reference's default mapping there.
				s.notes = append(s.notes, "PROMETHEUS_MAPPER_YAML is not read; with USE_PROMETHEUS=true the per-descriptor counters are served under the reference's default mapping names, ratelimit_service_rate_limit_{total_hits,over_limit,near_limit,within_limit,shadow_mode}{domain,key1,key2}, besides sluice's own series")
			}
		}
	}
	return errors.Join(errs...)
}

// runtimeOverridden returns a warning when --config (or SLUICE_CONFIG)
// names the config and some RUNTIME_ROOT, RUNTIME_SUBDIRECTORY or
// RUNTIME_APPDIRECTORY is set too: those then say nothing, and a
// deployment that set them for envoyproxy/ratelimit must learn that its
// directory is not the one read. "" when there is nothing to say, or when
// the config comes over xDS (which reads neither).
func (s *settings) runtimeOverridden(env map[string]string, given map[string]bool) string {
	if len(s.Configs) == 0 || s.ConfigSource.xdsEnabled() {
		return ""
	}
	var set []string
	for _, f := range []string{"runtime-root", "runtime-subdirectory", "runtime-appdirectory"} {
		name := s.source[f]
		if given[f] || env[name] != "" {
			set = append(set, name)
		}
	}
	if len(set) == 0 {
		return ""
	}
	return fmt.Sprintf("%s names the config (%s), so %s %s not read: the directory %s is not loaded",
		s.source["config"], strings.Join(s.Configs, ", "), strings.Join(set, ", "), plural(len(set), "is", "are"),
		filepath.Join(s.RuntimeRoot, s.RuntimeSubdirectory, s.RuntimeAppDirectory))
}

// referenceHealth honours the reference's REDIS_HEALTH_CHECK_ACTIVE_CONNECTION:
// true makes health follow Redis after start, as SLUICE_HEALTH_FOLLOWS_BACKEND
// does (which wins when given, as a flag or a variable).
func (s *settings) referenceHealth(env map[string]string, flagGiven bool) error {
	on, set, err := referenceBool(env, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
	if !set || err != nil {
		return err
	}
	if !flagGiven && env["SLUICE_HEALTH_FOLLOWS_BACKEND"] == "" {
		s.HealthFollowsBackend = on
	}
	return nil
}

// referenceNewer honours the settings of envoyproxy/ratelimit's newer
// releases that have no flag of their own. GRPC_MAX_CONCURRENT_STREAMS is
// SLUICE_GRPC_MAX_CONCURRENT_STREAMS (0 no bound in both), which wins when
// given. REDIS_OP_TIMEOUT bounds
// each Redis command there (its REDIS_TIMEOUT bounds only dialling), as
// sluice's REDIS_TIMEOUT bounds every round trip: when set above 0, it is
// that bound, whatever REDIS_TIMEOUT says. REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR
// asks for what sluice always does, and ENABLE_NEGATIVE_HITS for what it
// does by default: each is named in a note.
func (s *settings) referenceNewer(env map[string]string, given map[string]bool) error {
	var errs []error
	if v := env["GRPC_MAX_CONCURRENT_STREAMS"]; v != "" && !given["grpc-max-concurrent-streams"] && env["SLUICE_GRPC_MAX_CONCURRENT_STREAMS"] == "" {
		n, err := strconv.ParseUint(v, 10, 32)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("invalid GRPC_MAX_CONCURRENT_STREAMS=%q: want a whole number from 0 (no bound) to %d", v, uint32(math.MaxUint32)))
		case n > math.MaxInt32:
			s.Listener.GRPCMaxStreams = math.MaxInt32 // as good as no bound
		default:
			s.Listener.GRPCMaxStreams = int(n)
		}
	}
	timeoutFlag := given["redis-timeout"]
	if v := env["REDIS_OP_TIMEOUT"]; v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("invalid REDIS_OP_TIMEOUT=%q: want a duration with its unit, such as 500ms, 10s or 1m", v))
		case d > 0:
			note := fmt.Sprintf("REDIS_OP_TIMEOUT=%v bounds every Redis round trip (sluice's REDIS_TIMEOUT)", d)
			if timeoutFlag || env["REDIS_TIMEOUT"] != "" {
				note += fmt.Sprintf(", in place of %s=%v, which in sluice is that bound too", s.source["redis-timeout"], s.Redis.Timeout)
			}
			s.Redis.Timeout = d
			s.notes = append(s.notes, note)
		}
	}
	if on, set, err := referenceBool(env, "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR"); err != nil {
		errs = append(errs, err)
	} else if set {
		note := "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR=true: sluice always closes a Redis connection whose command is refused READONLY, so that the pool dials the address again (a failed-over master behind a Service or DNS name)"
		if !on {
			note = "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR=false: sluice closes a Redis connection whose command is refused READONLY all the same, so that the pool dials the address again; a connection to a demoted master only ever fails"
		}
		s.notes = append(s.notes, note)
	}
	if on, set, err := referenceBool(env, "ENABLE_NEGATIVE_HITS"); err != nil {
		errs = append(errs, err)
	} else if set && on {
		s.notes = append(s.notes, "ENABLE_NEGATIVE_HITS=true: sluice refunds is_negative_hits descriptors by default (SLUICE_PRIVILEGED_REQUESTS restricts who may)")
	} else if set {
		s.warnings = append(s.warnings, "ENABLE_NEGATIVE_HITS=false: sluice refunds is_negative_hits descriptors all the same; SLUICE_PRIVILEGED_REQUESTS=none refuses them")
	}
	return errors.Join(errs...)
}

// referenceBool reads a boolean variable of the reference's that has no
// flag of its own: set is false when it is empty, err names it when it is
// not a boolean.
func referenceBool(env map[string]string, name string) (on, set bool, err error) {
	v := env[name]
	if v == "" {
		return false, false, nil
	}
	on, err = strconv.ParseBool(v)
	if err != nil {
		return false, true, fmt.Errorf("invalid %s=%q: want true or false", name, v)
	}
	return on, true, nil
}

// redisSettingsSet returns the Redis settings given, flags as --name and
// variables by name, sorted: the bound ones (--redis-*, REDIS_*,
// SLUICE_REDIS_*, CACHE_KEY_PREFIX) and any other REDIS_ variable of the
// reference.
func redisSettingsSet(names []envName, given map[string]bool, env map[string]string) []string {
	var out []string
	bound := map[string]bool{}
	for _, n := range names {
		bound[n.env] = true
		if !strings.HasPrefix(n.flag, "redis-") && n.flag != "cache-key-prefix" {
			continue
		}
		switch {
		case given[n.flag]:
			out = append(out, "--"+n.flag)
		case env[n.env] != "":
			out = append(out, n.env)
		}
	}
	for k, v := range env {
		if strings.HasPrefix(k, "REDIS_") && !bound[k] && v != "" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// referenceOnly are envoyproxy/ratelimit variables sluice does not
// implement, each with what sluice does instead; a name ending in '_'
// stands for every variable with that prefix. Setting one logs a warning
// naming it and that; it changes nothing. (A variable that asks for
// nothing, such as USE_STATSD=false, is not warned about: referenceOff.)
var referenceOnly = []struct{ name, instead string }{
	{"DEBUG_HOST", "pprof is on the admin listener, SLUICE_ADMIN_ADDR (loopback by default)"},
	{"DEBUG_PORT", "pprof is on the admin listener, SLUICE_ADMIN_ADDR (loopback by default)"},
	{"REDIS_PERSECOND", "one Redis decides every unit (the migration guide, redis-persecond)"},
	{"REDIS_PERSECOND_", "one Redis decides every unit (the migration guide, redis-persecond)"},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "the nodes of a cluster are always asked in parallel"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "the Redis pools grow as needed"},
	{"REDIS_STARTUP_INITIAL_INTERVAL", "sluice starts without Redis and connects in the background (redis-down-at-start)"},
	{"REDIS_STARTUP_MAX_INTERVAL", "sluice starts without Redis and connects in the background (redis-down-at-start)"},
	{"REDIS_STARTUP_MAX_ELAPSED_TIME", "sluice starts without Redis and connects in the background (redis-down-at-start)"},
	{"EXPIRATION_JITTER_MAX_SECONDS", "each key expires exactly when its state is empty again"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "the local denial cache is on and sized in descriptors, SLUICE_LOCAL_CACHE_SIZE (local-cache-count)"},
	{"LIMIT_ALL_DESCRIPTORS_HEADERS_ENABLED", "the response headers describe the one status closest to its limit, as LIMIT_RESPONSE_HEADERS_ENABLED does; SLUICE_IETF_HEADERS adds every rule of that descriptor"},

	{"MEMCACHE_", "there is no memcache backend: Redis or the embedded backend"},
	{"USE_STATSD", "no statsd export: Prometheus metrics at /metrics"},
	{"STATSD_HOST", "no statsd export: Prometheus metrics at /metrics"},
	{"STATSD_PORT", "no statsd export: Prometheus metrics at /metrics"},
	{"USE_DOG_STATSD", "no statsd export: Prometheus metrics at /metrics"},
	{"USE_DOG_STATSD_MOGRIFIERS", "no statsd export: Prometheus metrics at /metrics"},
	{"DOG_STATSD_MOGRIFIER_", "no statsd export: Prometheus metrics at /metrics"},
	{"PROMETHEUS_MAPPER_YAML", "the metric names are fixed (docs/metrics.md)"},
	{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "response times are in seconds, as Prometheus names them (docs/metrics.md)"},
	{"DISABLE_STATS", "metrics are turned off by SLUICE_METRICS=false"},
	{"EXTRA_TAGS", "no statsd tags: add labels in the Prometheus scrape configuration"},
	{"STATS_FLUSH_INTERVAL", "Prometheus scrapes when it wants"},
}

// referenceRead are the envoyproxy/ratelimit variables sluice honours
// without a flag of their own: referenceListeners, referenceHealth and
// referenceNewer read them.
var referenceRead = []string{
	"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "GRPC_MAX_CONCURRENT_STREAMS",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
	"REDIS_OP_TIMEOUT", "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR", "ENABLE_NEGATIVE_HITS",
}

// referenceOff are the variables of referenceOnly whose value false asks
// for nothing sluice lacks (Envoy Gateway and Envoy AI Gateway set
// USE_STATSD=false): those values are accepted without a warning.
var referenceOff = map[string]bool{"USE_STATSD": true, "USE_DOG_STATSD": true, "DISABLE_STATS": true}

// referenceInstead returns what sluice does instead of the referenceOnly
// variable name.
func referenceInstead(name string) string {
	for _, r := range referenceOnly {
		if name == r.name || (strings.HasSuffix(r.name, "_") && strings.HasPrefix(name, r.name)) {
			return r.instead
		}
	}
	return ""
}

// ignoredReferenceVars returns the variables of env that referenceOnly
// names, sorted, but those that ask for nothing (referenceOff).
func ignoredReferenceVars(env map[string]string) []string {
	var out []string
	for name, v := range env {
		if v == "" || referenceInstead(name) == "" {
			continue
		}
		if off, err := strconv.ParseBool(v); referenceOff[name] && err == nil && !off {
			continue
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// parseFlags parses args with fs, printing nothing but, on --help, the
// usage to usage (then it returns flag.ErrHelp). A bad flag's error is
// returned with a pointer to --help, for the caller to print once.
func parseFlags(fs *flag.FlagSet, args []string, usage io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(usage)
		fs.Usage()
		return err
	}
	if err != nil {
		return fmt.Errorf("%w (%s --help lists the flags)", err, fs.Name())
	}
	return nil
}

// incumbentArgs splits the arguments of `sluice ratelimit`: kept are the
// flags serve defines, with their values, and --help; ignored is the rest
// (other flags, with their values when written name=value, and every
// other argument), which envoyproxy/ratelimit, reading no argument, would
// ignore too.
func incumbentArgs(args []string) (kept, ignored []string) {
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	serveFlags(fs, &settings{source: map[string]string{}})
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			ignored = append(ignored, args[i+1:]...)
			break
		}
		name, hasValue := strings.TrimLeft(a, "-"), false
		if !strings.HasPrefix(a, "-") || name == "" {
			ignored = append(ignored, a)
			continue
		}
		name, _, hasValue = strings.Cut(name, "=")
		f := fs.Lookup(name)
		if f == nil && name != "h" && name != "help" {
			ignored = append(ignored, a)
			continue
		}
		kept = append(kept, a)
		if f == nil || hasValue {
			continue // --help, or --name=value
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !(ok && b.IsBoolFlag()) && i+1 < len(args) {
			kept = append(kept, args[i+1]) // --name value
			i++
		}
	}
	return kept, ignored
}

// explainSetError says what f's standard value type accepts, in place of
// the flag package's bare "parse error": an operator who wrote
// REDIS_TIMEOUT=5 learns that a unit is needed. Errors of sluice's own
// value types, which say so already, are returned as they are.
func explainSetError(f *flag.Flag, err error) error {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err
	}
	switch g.Get().(type) {
	case time.Duration:
		return fmt.Errorf("want a duration with its unit, such as 500ms, 10s or 1m (%w)", err)
	case bool:
		return fmt.Errorf("want true or false (%w)", err)
	case int:
		return fmt.Errorf("want a whole number (%w)", err)
	case float64:
		return fmt.Errorf("want a number (%w)", err)
	}
	return err
}

// serviceLinkVar matches the variables Kubernetes sets for a Service
// named sluice or sluice-<something> (SLUICE_SERVICE_HOST,
// SLUICE_PORT_8081_TCP_ADDR, ...), unless the pod disables service links.
var serviceLinkVar = regexp.MustCompile(`^SLUICE(_[A-Z0-9_]+)?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// unknownSluiceVars returns, sorted, the variables of env in sluice's own
// SLUICE_ namespace that are no setting: a misspelt setting would
// otherwise be ignored in silence. Kubernetes' service-link variables and
// the test harnesses' SLUICE_TEST_ variables are not settings either, and
// are left alone.
func unknownSluiceVars(env map[string]string, names []envName) []string {
	known := make(map[string]bool, len(names))
	for _, n := range names {
		known[n.env] = true
	}
	var out []string
	for name := range env {
		if strings.HasPrefix(name, "SLUICE_") && !known[name] &&
			!strings.HasPrefix(name, "SLUICE_TEST_") && !serviceLinkVar.MatchString(name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// envMap turns os.Environ-style "K=V" pairs into a map; a later pair wins.
func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	if v == "" {
		return errors.New("empty path")
	}
	*l = append(*l, v)
	return nil
}

// choiceValue is a string flag restricted to some values, compared
// case-insensitively and stored in lower case.
type choiceValue struct {
	p       *string
	allowed []string
}

func (c *choiceValue) String() string {
	if c.p == nil {
		return ""
	}
	return *c.p
}

func (c *choiceValue) Set(v string) error {
	l := strings.ToLower(v)
	if !slices.Contains(c.allowed, l) {
		return fmt.Errorf("want one of %s", strings.Join(c.allowed, ", "))
	}
	*c.p = l
	return nil
}

// invertedBool is a boolean flag stored negated: --redis-coalesce=true
// sets Options.DisableCoalescing false.
type invertedBool struct{ p *bool }

func (b invertedBool) IsBoolFlag() bool { return true }

func (b invertedBool) String() string {
	if b.p == nil {
		return "true"
	}
	return strconv.FormatBool(!*b.p)
}

func (b invertedBool) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true or false")
	}
	*b.p = !on
	return nil
}

// chargingValue is SLUICE_CHARGE_OVER_LIMIT: a boolean flag whose absence
// is a third value, service.ChargeDebits.
type chargingValue struct{ p *service.Charging }

func (c chargingValue) IsBoolFlag() bool { return true }

func (c chargingValue) String() string {
	if c.p == nil {
		return service.ChargeDebits.String()
	}
	return c.p.String()
}

func (c chargingValue) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true or false")
	}
	*c.p = service.ChargeNone
	if on {
		*c.p = service.ChargeAll
	}
	return nil
}

// levelValue is a logrus level flag ("debug", "INFO", "warn", ...).
type levelValue struct{ p *logrus.Level }

func (l *levelValue) String() string {
	if l.p == nil {
		return ""
	}
	return l.p.String()
}

func (l *levelValue) Set(v string) error {
	lv, err := logrus.ParseLevel(v)
	if err != nil {
		return errors.New("want one of debug, info, warn, error")
	}
	*l.p = lv
	return nil
}

// requestBounds are SLUICE_MAX_DESCRIPTORS and SLUICE_MAX_REQUEST_RULES
// for the service, where 0 takes the default and a negative value means
// no bound.
func (s *settings) requestBounds() service.RequestBounds {
	none := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	return service.RequestBounds{MaxDescriptors: none(s.MaxDescriptors), MaxRequestRules: none(s.MaxRequestRules)}
}

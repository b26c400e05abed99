package redis

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// Options configures a Backend. The comment on each field names the
// envoyproxy/ratelimit setting it corresponds to; the server maps those
// environment variables onto these fields. The zero Options is not usable
// (URL is required); New fills the other fields' zero values with the
// defaults their comments give, and Validate refuses what New would.
type Options struct {
	// Type is "single" (the default when empty), "sentinel" or "cluster",
	// case-insensitive (REDIS_TYPE).
	Type string
	// URL says where Redis is (REDIS_URL), by Type:
	//   - single: "host:port", "redis://[user:pass@]host:port[/db]",
	//     "rediss://..." (TLS), or a unix socket path ("/run/redis.sock" or
	//     "unix:///run/redis.sock").
	//   - sentinel: "master,host:port,host:port,...": the master name, then
	//     the sentinels (at least one).
	//   - cluster: "host:port,host:port,...": seed nodes; the rest of the
	//     cluster is discovered.
	URL string
	// SocketType is "tcp" or "unix" (REDIS_SOCKET_TYPE). Empty infers it
	// from URL: a path is a unix socket, anything else TCP. Unix sockets
	// are only for Type single.
	SocketType string
	// Auth is "password" or "user:password" (REDIS_AUTH). When set it
	// overrides credentials in a redis:// URL.
	Auth string
	// SentinelAuth is "password" or "user:password" for the sentinels
	// themselves (REDIS_SENTINEL_AUTH).
	SentinelAuth string

	// TLS enables TLS to every Redis node (REDIS_TLS); a rediss:// URL
	// enables it too.
	TLS bool
	// TLSCACert is a PEM file of CAs to verify the server with
	// (REDIS_TLS_CACERT); empty means the system roots.
	TLSCACert string
	// TLSClientCert and TLSClientKey are PEM files of a client certificate
	// (REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY); both or neither.
	TLSClientCert, TLSClientKey string
	// TLSSkipHostnameVerification verifies the server's certificate chain
	// but not that it names the host dialled
	// (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION), e.g. for GCP Memorystore.
	TLSSkipHostnameVerification bool

	// PoolSize is the connection pool size per Redis node
	// (REDIS_POOL_SIZE). 0 means go-redis's default, 10 per CPU.
	PoolSize int
	// Timeout bounds every Redis round trip: dialing, writing, reading, and
	// waiting for a pooled connection (REDIS_TIMEOUT). A Decide that cannot
	// finish in time fails with backend.ErrUnavailable. 0 means
	// DefaultTimeout. The reference's default is 10s, which lets requests
	// and goroutines pile up behind a dead Redis while Envoy (whose own
	// rate-limit timeout defaults to 20ms) has long given up.
	Timeout time.Duration

	// Functions loads the decide script as a function library (FUNCTION
	// LOAD, Redis 7+) on every master and calls it with FCALL instead of
	// EVALSHA (sluice's --redis-functions): Redis then creates the
	// script's functions once, when the library loads, instead of on every
	// call (docs/decisions/0016-lean-redis-path.md). A node that lost the
	// library is given it again; on a Redis that cannot load or run it
	// (before 7, or an ACL forbidding FUNCTION LOAD or FCALL) the backend
	// logs a warning once and uses EVALSHA. Decisions are the same either
	// way.
	Functions bool

	// DisableCoalescing makes every Decide send its own pipeline, as
	// before coalescing existed (sluice's --redis-coalesce=false). By
	// default concurrent Decide calls bound for the same Redis node share
	// pipelines: see PipelineWindow and docs/decisions/0010-coalescing.md.
	DisableCoalescing bool
	// DisableMerging keeps one script call per Decide (and node) in a
	// coalesced pipeline (sluice's --redis-merge=false). By default the
	// calls of the Decides one pipeline carries are merged into script
	// calls of at most 16 descriptors (on a cluster, the calls of one
	// descriptor's slot): docs/decisions/0053-cross-request-batching.md.
	// Decisions are the same either way. Ignored without coalescing.
	DisableMerging bool
	// PipelineWindow is how long a pipeline waits, after the first call
	// queued for it, for more calls before it is sent
	// (REDIS_PIPELINE_WINDOW). 0, the default, never waits: a call goes out
	// at once if a pipeline slot to its node is free, and calls arriving
	// while every slot is busy go together in the next pipeline, so the
	// batches grow with the load and add no latency when it is light. The
	// reference applies its window in cluster mode only; sluice in every
	// mode. Ignored without coalescing.
	PipelineWindow time.Duration
	// PipelineLimit is the most commands one coalesced pipeline carries
	// (REDIS_PIPELINE_LIMIT, which the reference no longer honours). 0
	// means DefaultPipelineLimit. The checks of one Decide are never split,
	// so a Decide with more checks goes out alone, whole.
	PipelineLimit int
	// ObserveBatch, when set, is called with the number of commands of
	// every pipeline sent (coalesced or not, NOSCRIPT retries included),
	// for metrics. It runs on the sending goroutine, concurrently with
	// other pipelines, so it must be quick and safe for concurrent use.
	ObserveBatch func(n int)
	// pipelineLanes is how many pipelines may be in flight to one node
	// at a time when coalescing; 0 means defaultPipelineLanes. Tests set it.
	pipelineLanes int
	// mergeItems is the most descriptors one merged script call decides
	// (merge.go); 0 means maxMergeItems, 1 turns merging off. Benchmarks
	// set it, to compare.
	mergeItems int

	// WaitReplicas, when above 0, is the strict mode for failovers
	// (SLUICE_REDIS_WAIT_REPLICAS): every pipeline of decide calls ends
	// with WAIT WaitReplicas WaitTimeout, and when fewer replicas than
	// that acknowledged the pipeline's writes in time, its decisions fail
	// (backend.ErrUnavailable, so the domain's failure_mode answers)
	// although Redis counted them. A decision answered is then on that
	// many replicas, so a failover to one of them forgets none. 0, the
	// default, waits for none: a failover forgets what the promoted
	// replica had not received (docs/operations.md). On a cluster each
	// node's pipeline waits for that node's replicas, and a call
	// redirected by MOVED or ASK (a slot moving) fails instead of
	// following the redirection.
	WaitReplicas int
	// WaitTimeout bounds each WAIT (SLUICE_REDIS_WAIT_TIMEOUT); 0 means
	// DefaultWaitTimeout. It must be below Timeout. Ignored without
	// WaitReplicas.
	WaitTimeout time.Duration

	// KeyPrefix is prepended to every key (CACHE_KEY_PREFIX). It must not
	// contain '{' or '}', which would break the cluster hash tag.
	KeyPrefix string

	// Breaker configures the circuit breakers, one per Redis node, that
	// fail a node's calls fast while it keeps failing.
	Breaker BreakerOptions

	// FakeRedisClock, for tests only, replaces Redis's clock: when set,
	// every decide call passes its reading to the script, which uses it as
	// now instead of Redis's TIME, and writes keys with a TTL relative to
	// it plus 10 minutes (Redis still expires keys on its own clock; see
	// pkg/scripts/CONTRACT.md, "Clock"). Nil, the production setting, makes
	// every instance share Redis's clock.
	FakeRedisClock func() time.Time
	// Clock is this instance's own clock, used only to compute the
	// calendar-aligned windows around the present (the script then picks
	// the one holding Redis's time) and for the circuit breaker's open
	// period. Nil means FakeRedisClock if set, else time.Now. Tests skew or advance it.
	Clock func() time.Time

	// Logger receives connection and breaker events. Nil means
	// logrus.StandardLogger().
	Logger *logrus.Logger
}

// BreakerOptions configures the circuit breakers. There is one per Redis
// node: the single server, the Sentinel-managed master, or each cluster
// master (by address), so one dead master fails only the checks bound for
// it. The zero value is the default: a node's breaker opens after 5
// consecutive failed round trips to it, for 250ms.
//
// A round trip fails when the node does not answer: refused or reset
// connections, timeouts, no pooled connection in time, and refusals that
// more calls would make worse (OOM, BUSY, max clients, auth). Replies of a
// live node in a passing state (CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN,
// READONLY, MOVED, ASK) fail the call but not the round trip: they are
// answered at once and end by themselves, and calls should flow the moment
// they do.
type BreakerOptions struct {
	// Failures is how many consecutive failed round trips to a node open
	// its breaker. 0 means DefaultBreakerFailures; a negative value
	// disables the breakers.
	Failures int
	// OpenFor is how long an open breaker fails its node's calls at once
	// (with backend.ErrCircuitOpen, which wraps backend.ErrUnavailable)
	// before it lets one probe through; the probe's success closes it, its
	// failure opens it again. It is also the longest a restarted Redis
	// waits for its first decision. 0 means DefaultBreakerOpenFor.
	OpenFor time.Duration
}

// DefaultTimeout is the Timeout used when Options.Timeout is 0: long enough
// for a loaded Redis across a data centre, short enough that a dead one
// costs callers little and the circuit breaker opens within seconds.
const DefaultTimeout = time.Second

// DefaultWaitTimeout is WaitTimeout's default: replicas on a healthy
// network acknowledge within a few milliseconds, and a replica that cannot
// should fail decisions quickly, well inside Envoy's own rate-limit
// timeout budget.
const DefaultWaitTimeout = 50 * time.Millisecond

// DefaultPipelineLimit is PipelineLimit's default: large enough that a
// loaded node's pipelines are rarely cut, small enough that one pipeline's
// replies (about 60 bytes per rule) stay in a few socket buffers.
const DefaultPipelineLimit = 128

// defaultPipelineLanes is how many coalesced pipelines may be in flight to
// one node at a time: enough to keep Redis busy while the client reads one
// batch and builds the next, few enough that calls queue and batch. With
// merging, fewer lanes make bigger merged calls, which cost both the
// service and Redis less per decision
// (docs/decisions/0057-service-cpu-on-the-redis-path.md).
const defaultPipelineLanes = 2

// The breaker defaults. The open period is short because a probe is
// cheap (one call, to one node, per open period) and because it is how long
// decisions may stay failed after Redis is back; 250ms still spares a dead
// node all but four calls a second from each sluice instance.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerOpenFor  = 250 * time.Millisecond
)

// Redis types.
const (
	TypeSingle   = "single"
	TypeSentinel = "sentinel"
	TypeCluster  = "cluster"
)

// normalize returns opts with defaults filled in, or an error for settings
// that cannot work.
func (o Options) normalize() (Options, error) {
	if err := CheckType(o.Type); err != nil {
		return o, err
	}
	o.Type = strings.ToLower(strings.TrimSpace(o.Type))
	if o.Type == "" {
		o.Type = TypeSingle
	}
	if err := CheckSocketType(o.SocketType); err != nil {
		return o, err
	}
	o.SocketType = strings.ToLower(strings.TrimSpace(o.SocketType))
	if o.SocketType == "unix" && o.Type != TypeSingle {
		return o, fmt.Errorf("redis socket type unix works only with type single, not %s", o.Type)
	}
	if strings.TrimSpace(o.URL) == "" {
		return o, errors.New("redis URL is empty")
	}
	if err := CheckKeyPrefix(o.KeyPrefix); err != nil {
		return o, err
	}
	if err := CheckTimeout(o.Timeout); err != nil {
		return o, err
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if err := CheckPipelineWindow(o.PipelineWindow); err != nil {
		return o, err
	}
	if err := CheckPipelineLimit(o.PipelineLimit); err != nil {
		return o, err
	}
	if o.PipelineLimit == 0 {
		o.PipelineLimit = DefaultPipelineLimit
	}
	if o.pipelineLanes <= 0 {
		o.pipelineLanes = defaultPipelineLanes
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	if err := CheckWait(o.WaitReplicas, o.WaitTimeout, o.Timeout); err != nil {
		return o, err
	}
	if err := CheckPoolSize(o.PoolSize); err != nil {
		return o, err
	}
	if o.Breaker.Failures == 0 {
		o.Breaker.Failures = DefaultBreakerFailures
	}
	if err := CheckBreakerOpenFor(o.Breaker.OpenFor); err != nil {
		return o, err
	}
	if o.Breaker.OpenFor == 0 {
		o.Breaker.OpenFor = DefaultBreakerOpenFor
	}
	if err := CheckTLSClientPair(o.TLSClientCert, o.TLSClientKey); err != nil {
		return o, err
	}
	if o.Logger == nil {
		o.Logger = logrus.StandardLogger()
	}
	if o.Clock == nil {
		o.Clock = o.FakeRedisClock
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return o, nil
}

// Validate reports whether o can configure a Backend, as New would judge
// it, without connecting: each field's own check (the Check functions),
// the fields' combinations, the URL for the Type, and the TLS files. The
// error names the field or value at fault.
func (o Options) Validate() error {
	n, err := o.normalize()
	if err != nil {
		return err
	}
	c, err := newClient(n)
	if err != nil {
		return err
	}
	return c.Close()
}

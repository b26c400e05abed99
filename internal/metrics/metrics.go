package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"

	"github.com/sluice-rl/sluice/internal/service"
)

// Defaults for the zero values of Options.
const (
	// DefaultNearLimitRatio is the reference's NEAR_LIMIT_RATIO: an
	// admitted descriptor is near its limit when its binding rule has used
	// more than floor(80%) of its capacity, i.e. has less than 20% left.
	DefaultNearLimitRatio = 0.8
	// DefaultMaxUnknownDomains bounds how many distinct domains that are
	// not configured get their own domain label.
	DefaultMaxUnknownDomains = 100
	// DefaultMaxDetailedDescriptors bounds, per domain, how many distinct
	// descriptor label values detailed_metric and value_to_metric nodes
	// create.
	DefaultMaxDetailedDescriptors = 1000
	// MaxDescriptorLabelLen is the longest descriptor label value, in
	// bytes; longer paths are cut at a character boundary.
	MaxDescriptorLabelLen = 256
)

// DetailedValues is how request values appear in descriptor labels.
type DetailedValues int

// The ways request values appear in descriptor labels.
const (
	// DetailedRaw shows each value as the request sent it (cut with the
	// label at MaxDescriptorLabelLen), as the incumbent does: an API key
	// in a descriptor is then on /metrics for anyone who can read it.
	DetailedRaw DetailedValues = iota
	// DetailedHash shows each value as "h:" and the first 16 hex digits of
	// its SHA-256: series stay apart and stable across instances and
	// restarts, and a value can be recognised by hashing it, not read.
	DetailedHash
	// DetailedTruncate shows each value's first TruncatedValueLen bytes
	// and "…" when longer: values alike at their start share a series.
	DetailedTruncate
)

// TruncatedValueLen is how many bytes of a value DetailedTruncate keeps.
const TruncatedValueLen = 4

// ParseDetailedValues parses "raw", "hash" or "truncate".
func ParseDetailedValues(s string) (DetailedValues, error) {
	switch s {
	case "", "raw":
		return DetailedRaw, nil
	case "hash":
		return DetailedHash, nil
	case "truncate":
		return DetailedTruncate, nil
	}
	return DetailedRaw, fmt.Errorf("detailed metric values %q: want raw, hash or truncate", s)
}

// OtherLabel is the label value that domains and descriptors fold into once
// their cap is reached.
const OtherLabel = "_other"

// Options configures Metrics. The zero value is usable.
type Options struct {
	// NearLimitRatio: an admitted descriptor counts as near its limit when
	// its binding rule has used more than floor(capacity × NearLimitRatio)
	// (envoyproxy/ratelimit's NEAR_LIMIT_RATIO). 0 means
	// DefaultNearLimitRatio; values above 1 mean 1 (never near).
	NearLimitRatio float64
	// MaxUnknownDomains bounds the domain label values given to domains
	// that are not configured; 0 means DefaultMaxUnknownDomains.
	MaxUnknownDomains int
	// MaxDetailedDescriptors bounds the descriptor label values per domain;
	// 0 means DefaultMaxDetailedDescriptors.
	MaxDetailedDescriptors int
	// DetailedValues says how request values appear in the descriptor
	// label of detailed_metric and value_to_metric nodes: as they are (the
	// zero value, envoyproxy/ratelimit's behaviour), hashed or truncated.
	DetailedValues DetailedValues
	// Now is the clock, for durations and the reload timestamp. Nil means
	// time.Now.
	Now func() time.Time
	// IncumbentNames also registers the per-descriptor counters under the
	// names envoyproxy/ratelimit serves with USE_PROMETHEUS=true through
	// its default statsd mapping (the one Envoy Gateway mounts, and its
	// Grafana dashboard reads): ratelimit_service_rate_limit_<stat> with
	// labels domain, key1, key2.
	IncumbentNames bool
	// Logger receives one warning per domain the first time its
	// detailed_metric / value_to_metric descriptor values fold into
	// OtherLabel, and one per process the first time a domain that is not
	// configured folds into OtherLabel. Nil means a new logrus logger
	// writing to standard error.
	Logger logrus.FieldLogger
}

// Duration buckets, in seconds: a rate-limit decision takes well under a
// millisecond in memory and a few milliseconds on Redis, so the buckets are
// dense below 10 ms and reach one second for stalls.
var durationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
}

// batchBuckets are Redis pipeline sizes: 1, 2, 4, ... 1024 commands.
var batchBuckets = prometheus.ExponentialBuckets(1, 2, 11)

// Metrics holds sluice's metric families and implements service.Observer.
// It is safe for concurrent use. A nil *Metrics accepts every call and
// records nothing.
type Metrics struct {
	opts Options
	reg  prometheus.Registerer
	now  func() time.Time
	log  logrus.FieldLogger

	decisions     *prometheus.CounterVec                  // domain, outcome
	nearLimit     *prometheus.CounterVec                  // domain
	ruleHits      *prometheus.CounterVec                  // domain, rule
	ruleOver      *prometheus.CounterVec                  // domain, rule
	descHits      *prometheus.CounterVec                  // domain, descriptor
	descOver      *prometheus.CounterVec                  // domain, descriptor
	node          [numNodeCounters]*prometheus.CounterVec // domain, descriptor, key1, key2
	incumbent     [numNodeCounters]*prometheus.CounterVec // domain, key1, key2; nil without IncumbentNames
	requests      *prometheus.CounterVec                  // code
	requestsOver  prometheus.Counter
	shadowForced  prometheus.Counter
	overClamped   prometheus.Counter
	refused       *prometheus.CounterVec   // reason
	duration      *prometheus.HistogramVec // method
	backendTime   prometheus.Histogram
	backendChecks prometheus.Counter
	backendErrors *prometheus.CounterVec // kind
	reloads       *prometheus.CounterVec // result
	domainsGauge  prometheus.Gauge
	lastReload    prometheus.Gauge
	batchSize     prometheus.Histogram
	limits        limitGauges

	// Pre-resolved children.
	codeCounters  [codes.Unauthenticated + 1]prometheus.Counter
	errKind       [numErrKinds]prometheus.Counter
	reloadSuccess prometheus.Counter
	reloadFailure prometheus.Counter

	// domains maps a request domain to its pre-resolved counters.
	domains  cowMap[*domainStats]
	unknowns int             // domains created for unconfigured domains (under domains.mu)
	folded   bool            // an unconfigured domain folded into other (under domains.mu)
	applied  map[string]bool // the domains of the last ConfigApplied (under domains.mu)
	other    *domainStats    // where unconfigured domains fold past the cap
	methods  cowMap[prometheus.Observer]
}

// New creates sluice's metric families and registers them on reg. It fails
// if reg already holds a family of the same name (New was called twice on
// one registry, say).
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil Registerer")
	}
	if opts.NearLimitRatio <= 0 {
		opts.NearLimitRatio = DefaultNearLimitRatio
	}
	opts.NearLimitRatio = min(opts.NearLimitRatio, 1)
	if opts.MaxUnknownDomains <= 0 {
		opts.MaxUnknownDomains = DefaultMaxUnknownDomains
	}
	if opts.MaxDetailedDescriptors <= 0 {
		opts.MaxDetailedDescriptors = DefaultMaxDetailedDescriptors
	}
	m := &Metrics{opts: opts, reg: reg, now: opts.Now, log: opts.Logger}
	if m.now == nil {
		m.now = time.Now
	}
	if m.log == nil {
		m.log = logrus.New()
	}
	f := registrar{reg: reg}
	m.decisions = f.counterVec("sluice_decisions_total",
		"Request descriptors answered, by domain and outcome.", "domain", "outcome")
	m.nearLimit = f.counterVec("sluice_decisions_near_limit_total",
		fmt.Sprintf("Admitted request descriptors whose binding rule has used more than %g of its capacity (also counted as ok).", opts.NearLimitRatio),
		"domain")
	m.ruleHits = f.counterVec("sluice_rule_hits_total",
		"Cost (hits_addend) asked of named rules, admitted or not, by domain and rule name.", "domain", "rule")
	m.ruleOver = f.counterVec("sluice_rule_over_limit_total",
		"Cost (hits_addend) that named rules denied, by domain and rule name.", "domain", "rule")
	m.descHits = f.counterVec("sluice_descriptor_hits_total",
		"Cost asked of detailed_metric and value_to_metric descriptors, by domain and descriptor path with values.",
		"domain", "descriptor")
	m.descOver = f.counterVec("sluice_descriptor_over_limit_total",
		"Cost denied to detailed_metric and value_to_metric descriptors, by domain and descriptor path with values.",
		"domain", "descriptor")
	for k := range m.node {
		m.node[k] = f.counterVec("sluice_rate_limit_"+nodeCounterNames[k]+"_total", nodeCounterHelp[k],
			"domain", "descriptor", "key1", "key2")
	}
	if opts.IncumbentNames {
		for k := range m.incumbent {
			m.incumbent[k] = f.counterVec("ratelimit_service_rate_limit_"+nodeCounterNames[k],
				nodeCounterHelp[k]+" envoyproxy/ratelimit's name and labels (USE_PROMETHEUS=true).",
				"domain", "key1", "key2")
		}
	}
	m.requests = f.counterVec("sluice_requests_total",
		"ShouldRateLimit calls finished (gRPC and /json), by gRPC status code.", "code")
	m.requestsOver = f.counter("sluice_requests_over_limit_total",
		"ShouldRateLimit calls answered with overall code OVER_LIMIT.")
	m.shadowForced = f.counter("sluice_requests_shadow_forced_total",
		"ShouldRateLimit calls whose OVER_LIMIT overall code the global shadow mode turned into OK.")
	m.overClamped = f.counter("sluice_override_periods_clamped_total",
		"Request limit overrides whose period was longer than one YEAR (365 days), decided as requests_per_unit per YEAR.")
	m.refused = f.counterVec("sluice_requests_refused_total",
		"Calls refused for a request bound, to which Envoy (failure_mode_deny false) then applies no limit, by reason: "+
			"descriptors (SLUICE_MAX_DESCRIPTORS), rules (SLUICE_MAX_REQUEST_RULES), request_bytes (SLUICE_MAX_REQUEST_BYTES), domain_bytes (a domain over 64 KiB).", "reason")
	m.duration = f.histogramVec("sluice_request_duration_seconds",
		"Time to answer a unary gRPC call, by full method name.", durationBuckets, "method")
	m.backendTime = f.histogram("sluice_backend_decide_duration_seconds",
		"Time of one backend Decide call (all checks of one request).", durationBuckets)
	m.backendChecks = f.counter("sluice_backend_checks_total",
		"Checks (descriptors) sent to the backend.")
	m.backendErrors = f.counterVec("sluice_backend_errors_total",
		"Checks the backend could not decide, by kind: timeout, canceled, circuit_open, unavailable, other.", "kind")
	m.reloads = f.counterVec("sluice_config_reloads_total",
		"Configuration loads (the first one included), by result: success or failure.", "result")
	m.domainsGauge = f.gauge("sluice_config_domains",
		"Domains in the configuration in use.")
	m.lastReload = f.gauge("sluice_config_last_reload_success_timestamp_seconds",
		"Unix time of the last successful configuration load.")
	m.batchSize = f.histogram("sluice_redis_pipeline_batch_size",
		"Commands per Redis pipeline round trip.", batchBuckets)
	m.limits.register(&f)
	if f.err != nil {
		return nil, fmt.Errorf("metrics: register: %w", f.err)
	}
	for c := range m.codeCounters {
		m.codeCounters[c] = m.requests.WithLabelValues(codes.Code(c).String())
	}
	for k := range m.errKind {
		m.errKind[k] = m.backendErrors.WithLabelValues(errKind(k).String())
	}
	for _, r := range RefusalReasons {
		m.refused.WithLabelValues(r) // shown at 0 before the first refusal
	}
	m.reloadSuccess = m.reloads.WithLabelValues("success")
	m.reloadFailure = m.reloads.WithLabelValues("failure")
	m.other = m.newDomainStats(OtherLabel)
	return m, nil
}

// RequestBytesRefused is the reason of a call refused for being larger
// than SLUICE_MAX_REQUEST_BYTES; the service's reasons are service.Refused*.
const RequestBytesRefused = "request_bytes"

// RefusalReasons are the reasons of sluice_requests_refused_total.
var RefusalReasons = []string{service.RefusedDescriptors, service.RefusedRules, RequestBytesRefused, service.RefusedDomainBytes}

// RequestRefused counts a call refused for a request bound before the
// service saw it (RequestBytesRefused); the service's refusals are counted
// from RequestEvent.Refused.
func (m *Metrics) RequestRefused(reason string) {
	if m == nil {
		return
	}
	m.refused.WithLabelValues(reason).Inc()
}

// ConfigLoaded records a successful configuration load (the first one
// included) holding the given number of domains.
func (m *Metrics) ConfigLoaded(domains int) {
	if m == nil {
		return
	}
	m.reloadSuccess.Inc()
	m.domainsGauge.Set(float64(domains))
	m.lastReload.Set(float64(m.now().UnixNano()) / 1e9)
}

// ConfigLoadFailed records a configuration load that failed (the previous
// configuration, if any, stays in use).
func (m *Metrics) ConfigLoadFailed() {
	if m == nil {
		return
	}
	m.reloadFailure.Inc()
}

// ObserveBatch records one Redis pipeline round trip carrying n commands.
// The Redis backend calls it; n ≤ 0 is ignored.
func (m *Metrics) ObserveBatch(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.batchSize.Observe(float64(n))
}

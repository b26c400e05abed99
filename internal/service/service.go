package service

import (
	"cmp"
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// Options configures a Service. The zero value of every field is usable
// except Backend, which is required.
type Options struct {
	// Backend decides every check (memory or Redis).
	Backend backend.Backend
	// Local decides the checks of FailureLocal domains when Backend fails.
	// Nil makes such domains behave like FailureError.
	Local backend.Backend
	// LocalInstances divides each rule's Limit and Burst (rounded up, at
	// least 1 unless the limit is 0) when a FailureLocal domain falls back
	// to Local, so that N instances together admit about the global limit.
	// 0 and 1 mean no division.
	LocalInstances int
	// ShadowMode is the global SHADOW_MODE: an OVER_LIMIT overall code is
	// reported OK; the statuses keep OVER_LIMIT.
	ShadowMode bool
	// QuotaMode is the global QUOTA_MODE: every descriptor counts as a quota
	// descriptor for the overall code.
	QuotaMode bool
	// ChargeOverLimit is the global SLUICE_CHARGE_OVER_LIMIT: which costs
	// that do not fit are charged (limit.Cost.Charge) on nodes that do not
	// set charge_over_limit and are not quota nodes, and on limit
	// overrides. quota_mode nodes (or every node under QuotaMode) charge
	// every cost unless their config says charge_over_limit: false. The
	// zero value, ChargeDebits, is the default.
	ChargeOverLimit Charging
	// Headers selects the response headers added.
	Headers HeaderOptions
	// DynamicMetadata fills the response's dynamic_metadata
	// (RESPONSE_DYNAMIC_METADATA).
	DynamicMetadata bool
	// ResetMillis sends duration_until_reset to the millisecond (rounded
	// up). By default it is whole seconds, rounded up, as the incumbent
	// sends it: Envoy's x-ratelimit-reset header takes the seconds and
	// drops the fraction (SLUICE_RESET_MILLISECONDS).
	ResetMillis bool
	// AllOrNothing charges none of a request's descriptors when any of
	// them is denied (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT): the
	// admitted ones are decided together with the denied one by a backend
	// that implements backend.TogetherDecider, or refunded right after the
	// decision otherwise (together.go says what that costs).
	AllOrNothing bool
	// IgnoreOverrideUnitMultiplier ignores a request limit override's
	// unit_multiplier, as envoyproxy/ratelimit does: the override's period
	// is one unit (SLUICE_OVERRIDE_UNIT_MULTIPLIER=false). By default it
	// is honoured.
	IgnoreOverrideUnitMultiplier bool
	// Bounds limits the size of requests.
	Bounds RequestBounds
	// Logger receives the service's logs. Nil means a new logrus logger
	// writing to stderr at info level.
	Logger *logrus.Logger
	// Observer, when not nil, is told every descriptor outcome and every
	// finished call.
	Observer Observer
}

// HeaderOptions selects the response headers the service adds
// (response_headers_to_add). All describe one descriptor status, chosen as
// envoyproxy/ratelimit does: the last non-quota OVER_LIMIT status if any,
// otherwise the status with the lowest limit_remaining among those with a
// limit.
type HeaderOptions struct {
	// Enabled adds the Limit, Remaining and Reset headers
	// (LIMIT_RESPONSE_HEADERS_ENABLED).
	Enabled bool
	// LimitHeader, RemainingHeader and ResetHeader name the three headers;
	// empty means "RateLimit-Limit", "RateLimit-Remaining" and
	// "RateLimit-Reset" (LIMIT_LIMIT_HEADER, ...). Reset is in whole
	// seconds, rounded up.
	LimitHeader, RemainingHeader, ResetHeader string
	// IETF also adds the current IETF draft's structured fields
	// RateLimit-Policy (every rule of the chosen descriptor:
	// `"name";q=limit;w=period-seconds`) and RateLimit (the binding rule:
	// `"name";r=remaining;t=reset-seconds`). A rule without a usable name is
	// named by its rule ID. Requires Enabled.
	IETF bool
	// RetryAfter adds Retry-After (whole seconds, rounded up; the longest
	// wait of the denied statuses) when the overall code is OVER_LIMIT.
	// Requires Enabled.
	RetryAfter bool
	// Request adds the Limit, Remaining and Reset values of the same status
	// to the request Envoy forwards upstream (request_headers_to_add), as
	// envoyproxy/ratelimit's LIMIT_REQUEST_HEADERS_ENABLED does: on every
	// response, OK or OVER_LIMIT, so that an upstream behind a shadow-mode
	// limit can treat requests over it differently. Independent of Enabled.
	Request bool
	// RequestLimitHeader, RequestRemainingHeader and RequestResetHeader name
	// them; empty means "RateLimit-Limit", "RateLimit-Remaining" and
	// "RateLimit-Reset" (LIMIT_REQUEST_LIMIT_HEADER, ...).
	RequestLimitHeader, RequestRemainingHeader, RequestResetHeader string
}

// RequestBounds bounds request sizes; a request beyond any bound gets
// InvalidArgument naming it. Zero fields take the defaults. The work of
// one request is at most MaxDescriptors descriptors, each matched through
// at most MaxEntries entries, and rules weighing at most MaxRequestRules
// decided.
type RequestBounds struct {
	// MaxDescriptors is the most descriptors per request (default
	// DefaultMaxDescriptors); a negative value means no bound but the
	// request's size.
	MaxDescriptors int
	// MaxEntries is the most entries per descriptor (default 32); a
	// domain whose nodes are deeper allows as many as its depth.
	MaxEntries int
	// MaxEntryLen is the most bytes in the domain and in each entry key and
	// value (default 64 KiB).
	MaxEntryLen int
	// MaxRequestRules is the most the rules the descriptors of one request
	// ask to decide may weigh (backend.Weight: 1 per rule, 64 per sliding
	// log; default DefaultMaxRequestRules); a negative value means no bound
	// but MaxDescriptors × descriptor.MaxRules.
	MaxRequestRules int
}

// The default request bounds. Envoy's route config fixes how many
// descriptors and entries a request has, but a client chooses the values
// (header values, paths), and a request refused with InvalidArgument is,
// to Envoy, a failed call: with its default failure_mode_deny=false it
// passes unlimited. DefaultMaxEntryLen is therefore above the longest
// value Envoy forwards by default (its whole request header block is at
// most 60 KiB, max_request_headers_kb), so that no client can skip a
// limit by lengthening a header; long values are hashed into a bounded
// identity anyway. DefaultMaxDescriptors and DefaultMaxRequestRules are
// above what Envoy Gateway can send in one call: 512 rules (a route's
// policy merged with its gateway's), each a descriptor of one rule per
// matching method condition, 512 × 9 = 4,608 (decision 0081). On Redis
// a request's rules are decided in one script call: 8,192 rules took
// 29-38 ms of it, where 131,072 (4,096 descriptors of 32 rules) took 3.4 s.
// A sliding log weighs 64 (backend.SlidingLogWeight), so the default
// admits 128 of them in one request (docs/operations.md gives the Redis
// time of that worst case).
const (
	DefaultMaxDescriptors  = 8192
	DefaultMaxRequestRules = 8192
	DefaultMaxEntries      = descriptor.MaxRequestEntries
	DefaultMaxEntryLen     = 64 << 10
)

// Service implements rlsv3.RateLimitServiceServer. It is safe for
// concurrent use; SetConfig may be called while requests are served.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	opts Options
	log  *logrus.Logger
	// errLog and refundLog rate-limit the warnings about backend errors
	// and about failed all-or-nothing refunds.
	errLog, refundLog throttledLog
	// debitLog rate-limits the warning about debits denied uncharged
	// (warnUnchargedDebit).
	debitLog throttledLog
	// boundLog rate-limits the warning about requests refused for a
	// bound (validate).
	boundLog throttledLog
	// clampLog rate-limits the warning about limit overrides longer than
	// MaxOverridePeriod (plan).
	clampLog throttledLog
	cfg      atomic.Pointer[descriptor.Config]
	pool     sync.Pool // *work
}

// New returns a Service with no config (every domain unknown) until
// SetConfig is called. opts.Backend must not be nil.
func New(opts Options) *Service {
	if opts.Bounds.MaxDescriptors == 0 {
		opts.Bounds.MaxDescriptors = DefaultMaxDescriptors
	}
	if opts.Bounds.MaxEntries <= 0 {
		opts.Bounds.MaxEntries = DefaultMaxEntries
	}
	if opts.Bounds.MaxEntryLen <= 0 {
		opts.Bounds.MaxEntryLen = DefaultMaxEntryLen
	}
	if opts.Bounds.MaxRequestRules == 0 {
		opts.Bounds.MaxRequestRules = DefaultMaxRequestRules
	}
	if opts.Headers.LimitHeader == "" {
		opts.Headers.LimitHeader = "RateLimit-Limit"
	}
	if opts.Headers.RemainingHeader == "" {
		opts.Headers.RemainingHeader = "RateLimit-Remaining"
	}
	if opts.Headers.ResetHeader == "" {
		opts.Headers.ResetHeader = "RateLimit-Reset"
	}
	opts.Headers.RequestLimitHeader = cmp.Or(opts.Headers.RequestLimitHeader, "RateLimit-Limit")
	opts.Headers.RequestRemainingHeader = cmp.Or(opts.Headers.RequestRemainingHeader, "RateLimit-Remaining")
	opts.Headers.RequestResetHeader = cmp.Or(opts.Headers.RequestResetHeader, "RateLimit-Reset")
	s := &Service{opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = logrus.New()
	}
	s.pool.New = func() any { return new(work) }
	return s
}

// SetConfig atomically replaces the config used by requests that start
// after it returns. Nil is allowed: every domain is then unknown.
func (s *Service) SetConfig(c *descriptor.Config) { s.cfg.Store(c) }

// Config returns the current config, possibly nil.
func (s *Service) Config() *descriptor.Config { return s.cfg.Load() }

// ShouldRateLimit answers one Envoy rate-limit request. Bad requests get
// InvalidArgument; a backend failure in a FailureError domain gets
// Unavailable with the reason (Canceled when the caller went away).
// It never panics: a bug caught here is logged and answered Internal.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.WithFields(logrus.Fields{"panic": r, "stack": string(debug.Stack())}).
				Error("service: recovered from a panic in ShouldRateLimit")
			resp, err = nil, status.Error(codes.Internal, "internal error while deciding rate limits")
			if s.opts.Observer != nil {
				s.opts.Observer.Request(RequestEvent{Domain: req.GetDomain(), Err: err})
			}
		}
	}()
	if refused, err := s.validate(req); err != nil {
		s.refuse(req, refused, err)
		return nil, err
	}
	w := s.pool.Get().(*work)
	resp, shadowForced, err := s.shouldRateLimit(ctx, req, w)
	refused := w.refused
	w.reset()
	s.pool.Put(w)
	if refused != "" {
		s.refuse(req, refused, err)
		return nil, err
	}
	if err != nil && s.log.IsLevelEnabled(logrus.DebugLevel) {
		s.log.WithField("domain", req.GetDomain()).WithError(err).Debug("service: ShouldRateLimit failed")
	}
	if s.opts.Observer != nil {
		s.opts.Observer.Request(RequestEvent{Domain: req.GetDomain(), Code: resp.GetOverallCode(), ShadowForced: shadowForced, Err: err})
	}
	return resp, err
}

// refuse reports a request refused with err: a warning (throttled) when it
// was for a bound (reason not ""), and the observer's request event.
func (s *Service) refuse(req *rlsv3.RateLimitRequest, reason string, err error) {
	if reason != "" {
		s.boundLog.warn(s.log.WithFields(logrus.Fields{"domain": truncated(req.GetDomain()), "reason": reason}),
			"service: request refused for a bound; Envoy applies no limit to it (failure_mode_deny false)", err)
	}
	if s.opts.Observer != nil {
		s.opts.Observer.Request(RequestEvent{Domain: req.GetDomain(), Refused: reason, Err: err})
	}
}

// truncated is domain cut to 256 bytes for a log line: a refused domain
// may be 64 KiB or more.
func truncated(domain string) string {
	if len(domain) > 256 {
		return domain[:256] + "..."
	}
	return domain
}

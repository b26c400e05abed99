package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// Defaults of Options.
const (
	// DefaultAssignmentTTL is how long an assignment lives in Envoy
	// without a newer one: a server lost for longer leaves Envoy's
	// expired_assignment_behavior in charge. Envoy reports every
	// reporting_interval (typically 1 to 5 seconds) and gets a fresh
	// assignment each time.
	DefaultAssignmentTTL = 10 * time.Second
	// DefaultAbandonAfter is how long a bucket may report no request
	// before the service abandons it (Envoy then forgets it, and
	// subscribes again at its next request).
	DefaultAbandonAfter = 5 * time.Minute
	// DefaultMaxBuckets bounds the buckets one stream may report.
	DefaultMaxBuckets = 10000
	// DefaultDemandWindow is the time constant of the demand's moving
	// average.
	DefaultDemandWindow = 5 * time.Second
)

// Options configure a Service. Store and Config are required.
type Options struct {
	// Store keeps the shares (the backend's QuotaStore).
	Store backend.QuotaStore
	// Config returns the config in use (a reload swaps it).
	Config func() *descriptor.Config
	// Now is the clock; nil means time.Now. Tests inject one.
	Now func() time.Time
	// AssignmentTTL is every assignment's assignment_time_to_live but a
	// denial until a window's end; it is also how long a client's share
	// is kept after its last report (its Envoy may enforce its last
	// assignment that long). Whole seconds (Envoy reads only seconds);
	// 0 means DefaultAssignmentTTL.
	AssignmentTTL time.Duration
	// AbandonAfter is how long a bucket reports no request before it is
	// abandoned; 0 means DefaultAbandonAfter.
	AbandonAfter time.Duration
	// DemandWindow is the time constant of the moving average a client's
	// demand is (an exponentially weighted average of its reported
	// rates): shorter follows moves faster, longer is steadier for
	// clients that send few requests per report. 0 means
	// DefaultDemandWindow.
	DemandWindow time.Duration
	// MaxBuckets bounds the buckets of one stream; 0 means
	// DefaultMaxBuckets. A report that would go beyond ends the stream
	// with ResourceExhausted.
	MaxBuckets int
	// Logger receives stream and store errors; nil means logrus' standard
	// logger.
	Logger logrus.FieldLogger
	// Metrics, if not nil, counts streams, buckets, assignments and the
	// reported usage (NewMetrics).
	Metrics *Metrics
}

// Service serves StreamRateLimitQuotas. It is safe for concurrent use.
type Service struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	opts Options
	log  logrus.FieldLogger
	// id names this instance in members: unique across instances.
	id  string
	seq atomic.Uint64

	mu      sync.Mutex
	streams map[*stream]struct{}
}

var _ rlqspb.RateLimitQuotaServiceServer = (*Service)(nil)

// New returns a Service, or an error when Options lack Store or Config or
// AssignmentTTL is not whole seconds.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Config == nil {
		return nil, errors.New("rlqs: Options.Store and Options.Config are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AssignmentTTL == 0 {
		o.AssignmentTTL = DefaultAssignmentTTL
	}
	if o.AssignmentTTL < time.Second || o.AssignmentTTL%time.Second != 0 {
		return nil, fmt.Errorf("rlqs: assignment TTL %v: want whole seconds, at least 1s (Envoy reads only the seconds)", o.AssignmentTTL)
	}
	if o.AbandonAfter == 0 {
		o.AbandonAfter = DefaultAbandonAfter
	}
	if o.AbandonAfter < 0 {
		return nil, fmt.Errorf("rlqs: abandon-after %v is negative", o.AbandonAfter)
	}
	if o.DemandWindow <= 0 {
		o.DemandWindow = DefaultDemandWindow
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = DefaultMaxBuckets
	}
	if o.Logger == nil {
		o.Logger = logrus.StandardLogger()
	}
	var tag [6]byte
	_, _ = rand.Read(tag[:])
	return &Service{opts: o, log: o.Logger, id: hex.EncodeToString(tag[:]), streams: make(map[*stream]struct{})}, nil
}

// Register registers s on g, beside the other services.
func (s *Service) Register(g grpc.ServiceRegistrar) { rlqspb.RegisterRateLimitQuotaServiceServer(g, s) }

// stream is one client's stream: one Envoy (one filter config's client).
type stream struct {
	member string
	domain string
	opened time.Time

	mu      sync.Mutex // guards buckets against Snapshot
	buckets map[string]*bucket
}

// bucket is one bucket a stream reports.
type bucket struct {
	id   *rlqspb.BucketId
	desc string
	// cfg is the config node and keys were resolved against.
	cfg   *descriptor.Config
	node  *descriptor.Node
	rules []limit.Rule // node's rules; nil when unmatched, unlimited or shadow
	keys  []string     // the store keys of rules
	// lastReport and lastActive: the last report, the last with requests.
	lastReport, lastActive time.Time
	// For Snapshot: the last report's rate (requests per second) and the
	// last shares and assignment.
	rate   float64
	shares []backend.QuotaShare
	last   string
}

// StreamRateLimitQuotas implements the RLQS stream: each report is
// answered with an assignment for every bucket it carries.
func (s *Service) StreamRateLimitQuotas(g grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.WithField("panic", p).Error("rlqs: stream handler panicked")
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	st := &stream{
		member:  s.id + "-" + strconv.FormatUint(s.seq.Add(1), 10),
		opened:  s.opts.Now(),
		buckets: make(map[string]*bucket),
	}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	s.opts.Metrics.streamOpened()
	defer func() {
		s.mu.Lock()
		delete(s.streams, st)
		s.mu.Unlock()
		st.mu.Lock()
		n := len(st.buckets)
		st.mu.Unlock()
		s.opts.Metrics.streamClosed(n)
	}()
	ctx := g.Context()
	for {
		msg, err := g.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.report(ctx, st, msg)
		if err != nil {
			return err
		}
		// Every report is answered, with no action when the store could
		// not be reached: Envoy then keeps its assignments until they
		// expire.
		if err := g.Send(resp); err != nil {
			return err
		}
	}
}

// report handles one message of st.
func (s *Service) report(ctx context.Context, st *stream, msg *rlqspb.RateLimitQuotaUsageReports) (*rlqspb.RateLimitQuotaResponse, error) {
	switch {
	case st.domain == "" && msg.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "rlqs: the first report must name the domain")
	case st.domain == "":
		st.domain = msg.GetDomain()
	case msg.GetDomain() != "" && msg.GetDomain() != st.domain:
		return nil, status.Errorf(codes.InvalidArgument, "rlqs: the stream's domain is %q; a report names %q (open a new stream for another domain)", st.domain, msg.GetDomain())
	}
	now := s.opts.Now()
	cfg := s.opts.Config()
	resp := &rlqspb.RateLimitQuotaResponse{}
	if cfg == nil {
		// No config yet (xDS has not sent one): no assignment, so that
		// Envoy's no_assignment_behavior applies, as ShouldRateLimit
		// answers Unavailable meanwhile.
		s.opts.Metrics.reported()
		return resp, nil
	}
	for _, u := range msg.GetBucketQuotaUsages() {
		id := u.GetBucketId()
		if len(id.GetBucket()) == 0 {
			return nil, status.Error(codes.InvalidArgument, "rlqs: a usage report has no bucket_id entries")
		}
		action, err := s.usage(ctx, st, cfg, now, u)
		if err != nil {
			return nil, err
		}
		if action != nil {
			resp.BucketAction = append(resp.BucketAction, action)
		}
	}
	s.opts.Metrics.reported()
	return resp, nil
}

// usage handles one bucket's usage and returns its action, or nil when the
// store could not be reached (Envoy keeps its assignment until it
// expires).
func (s *Service) usage(ctx context.Context, st *stream, cfg *descriptor.Config, now time.Time, u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) (*rlqspb.RateLimitQuotaResponse_BucketAction, error) {
	id := u.GetBucketId()
	key := bucketKey(id.GetBucket())
	st.mu.Lock()
	b := st.buckets[key]
	if b == nil {
		if len(st.buckets) >= s.opts.MaxBuckets {
			st.mu.Unlock()
			return nil, status.Errorf(codes.ResourceExhausted, "rlqs: a stream may report at most %d buckets", s.opts.MaxBuckets)
		}
		b = &bucket{id: id, desc: describe(id.GetBucket()), lastActive: now}
		st.buckets[key] = b
		st.mu.Unlock()
		s.opts.Metrics.bucketAdded()
	} else {
		st.mu.Unlock()
	}
	count := u.GetNumRequestsAllowed() + u.GetNumRequestsDenied()
	if count > 0 {
		b.lastActive = now
	}
	elapsed := u.GetTimeElapsed().AsDuration()
	if elapsed < time.Second && !b.lastReport.IsZero() {
		// Envoy sends whole seconds: 0 for a report less than a second
		// after the last; the server's own measure is finer.
		elapsed = now.Sub(b.lastReport)
	}
	if elapsed <= 0 {
		elapsed = time.Second
	}
	rate := float64(count) / elapsed.Seconds()
	if !b.lastReport.IsZero() {
		// The first report is one request: a rate of its own; later
		// ones move the average by the share of its time constant
		// they cover.
		w := 1 - math.Exp(-elapsed.Seconds()/s.opts.DemandWindow.Seconds())
		rate = b.rate + w*(rate-b.rate)
	}
	st.mu.Lock()
	b.lastReport, b.rate = now, rate
	st.mu.Unlock()

	matched := b.rules != nil
	if b.cfg != cfg {
		s.resolve(st, cfg, b)
	}
	s.opts.Metrics.usage(st.domain, b.node, u.GetNumRequestsAllowed(), u.GetNumRequestsDenied())
	switch {
	case matched && b.rules == nil:
		// Removed from the config: forget it, so that its next request
		// subscribes anew (and is answered as unmatched).
		return s.abandon(st, key, b, "its rules left the config"), nil
	case now.Sub(b.lastActive) >= s.opts.AbandonAfter:
		return s.abandon(st, key, b, "no requests reported"), nil
	case b.rules == nil:
		st.mu.Lock()
		b.shares, b.last = nil, "allow_all"
		st.mu.Unlock()
		s.opts.Metrics.assigned("allow_all")
		return allowAll(id, s.opts.AssignmentTTL), nil
	}
	at := limit.MicrosOf(now)
	req := backend.QuotaRequest{Member: st.member, Now: at, Stale: s.opts.AssignmentTTL.Microseconds(), Rules: make([]backend.QuotaRule, len(b.rules))}
	for i, r := range b.rules {
		start, end := r.Window(at)
		q := backend.QuotaRule{Key: b.keys[i], Demand: rate * float64(end-start) / 1e6, Limit: r.Limit, Keep: at}
		if isWindow(r) {
			q.Window, q.Used, q.Keep = start, u.GetNumRequestsAllowed(), end
		}
		req.Rules[i] = q
	}
	shares, err := s.opts.Store.Share(ctx, req)
	if err != nil {
		s.opts.Metrics.storeFailed()
		s.log.WithError(err).WithField("bucket", b.desc).Warn("rlqs: the quota store failed; no assignment sent (Envoy keeps its last one until it expires)")
		return nil, nil
	}
	gs := make([]grant, len(b.rules))
	for i, r := range b.rules {
		gs[i] = ruleGrant(r, shares[i], at)
	}
	g := tightest(gs)
	st.mu.Lock()
	b.shares, b.last = shares, g.String()
	st.mu.Unlock()
	if g.deny {
		s.opts.Metrics.assigned("deny_all")
	} else {
		s.opts.Metrics.assigned("token_bucket")
	}
	return g.action(id, at, s.opts.AssignmentTTL), nil
}

// resolve matches b against cfg's domain and sets its rules and keys; a
// client whose rules changed leaves the keys of the old ones.
func (s *Service) resolve(st *stream, cfg *descriptor.Config, b *bucket) {
	old := b.keys
	dom := cfg.Domain(st.domain)
	node, entries := Resolve(dom, b.id.GetBucket())
	st.mu.Lock()
	b.cfg, b.node, b.rules, b.keys = cfg, node, nil, nil
	if node != nil && len(node.Rules) > 0 && !node.Unlimited && !node.ShadowMode {
		ident := stateIdentity(st.domain, node, entries)
		b.rules = node.Rules
		b.keys = make([]string, len(node.Rules))
		for i, r := range node.Rules {
			b.keys[i] = s.opts.Store.QuotaKey(ident, r.ID())
		}
	}
	st.mu.Unlock()
	if gone := without(old, b.keys); len(gone) > 0 {
		s.leave(st, gone)
	}
}

// abandon drops b from st and from the store, and returns the abandon
// action.
func (s *Service) abandon(st *stream, key string, b *bucket, why string) *rlqspb.RateLimitQuotaResponse_BucketAction {
	st.mu.Lock()
	delete(st.buckets, key)
	st.mu.Unlock()
	s.opts.Metrics.bucketRemoved()
	s.opts.Metrics.assigned("abandon")
	s.leave(st, b.keys)
	s.log.WithFields(logrus.Fields{"bucket": b.desc, "domain": st.domain}).Debug("rlqs: bucket abandoned: " + why)
	return abandon(b.id)
}

// leave drops st's entries from keys, bounded in time and detached from
// the stream (whose end must not cancel it).
func (s *Service) leave(st *stream, keys []string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.opts.Store.Leave(ctx, st.member, keys); err != nil {
		s.opts.Metrics.storeFailed()
		s.log.WithError(err).Warn("rlqs: could not drop a share from the quota store (it expires after the assignment TTL)")
	}
}

// without returns the elements of a not in b.
func without(a, b []string) []string {
	var out []string
	for _, x := range a {
		found := false
		for _, y := range b {
			if x == y {
				found = true
				break
			}
		}
		if !found {
			out = append(out, x)
		}
	}
	return out
}

// String describes g for the admin view.
func (g grant) String() string {
	if g.deny {
		if g.denyUntil > 0 {
			return "deny_all until " + time.UnixMicro(g.denyUntil).UTC().Format(time.RFC3339)
		}
		return "deny_all"
	}
	return fmt.Sprintf("token_bucket %d per %ds, max %d", g.perFill, g.fill, g.max)
}

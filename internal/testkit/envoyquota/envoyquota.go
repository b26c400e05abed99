// Package envoyquota plays Envoy's rate_limit_quota HTTP filter against a
// Rate Limit Quota Service, as the filter's source defines it
// (source/extensions/filters/http/rate_limit_quota: global_client_impl.cc
// and filter.cc), on a clock the test controls:
//
//   - the first request matched into a bucket is decided by the
//     no_assignment_behavior, creates the bucket with that request counted,
//     opens the stream if none is open and sends an immediate report of that
//     bucket alone, with a time_elapsed of 0;
//   - every reporting_interval, one report of every cached bucket: the
//     allowed and denied counts since the last report (then zeroed) and
//     time_elapsed in whole seconds (truncated, as the filter does); a
//     closed stream is reopened first, and the reports are dropped when
//     that fails;
//   - a response's actions: a bucket not cached, or without id, is skipped;
//     a blanket rule is applied; a token bucket replaces the cached one
//     only when max_tokens, tokens_per_fill or fill_interval's nanos
//     differ (the filter compares the nanos only), else the cached one is
//     kept with its tokens; requests_per_time_unit is skipped (not
//     supported); abandon erases the bucket;
//   - an assignment expires after assignment_time_to_live's whole seconds
//     (an unset one is 0 seconds: at once), then the
//     expired_assignment_behavior's fallback applies for its TTL, then the
//     no_assignment_behavior;
//   - a token bucket holds max_tokens at its creation and refills
//     continuously at tokens_per_fill per fill_interval, read in whole
//     seconds; a request takes one token.
//
// An Envoy is driven by one goroutine: Request and Tick are not safe for
// concurrent use. Each report waits for the server's response before
// returning, so that a run is deterministic; a server that does not answer
// within a bound counts as a lost stream.
package envoyquota

import (
	"context"
	"slices"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Config is the filter's configuration for one Envoy.
type Config struct {
	// Domain is the filter's domain, sent in every report.
	Domain string
	// ReportingInterval is the bucket settings' reporting_interval.
	ReportingInterval time.Duration
	// DenyWithoutAssignment makes no_assignment_behavior DENY_ALL; the
	// default is ALLOW_ALL.
	DenyWithoutAssignment bool
	// Fallback, if not nil, is expired_assignment_behavior's
	// fallback_rate_limit, applied for FallbackTTL after an assignment
	// expires.
	Fallback    *typev3.RateLimitStrategy
	FallbackTTL time.Duration
	// Wait bounds the wait for a response to a report (real time); 0
	// means 5 seconds.
	Wait time.Duration
}

// Envoy is one simulated Envoy with the filter.
type Envoy struct {
	cfg  Config
	conn grpc.ClientConnInterface
	now  func() time.Time

	buckets    map[string]*cached
	stream     *stream
	nextReport time.Time // zero until the first bucket starts the timer

	// Allowed and Denied count every request the filter decided.
	Allowed, Denied uint64
	// Reports counts reports sent; Lost counts those dropped (no stream)
	// or unanswered.
	Reports, Lost int
}

// cached is one bucket of the filter's cache.
type cached struct {
	id              *rlqspb.BucketId
	allowed, denied uint64
	lastReport      time.Time

	action    *rlqspb.RateLimitQuotaResponse_BucketAction // nil: no assignment
	fallback  bool                                        // action is the expired fallback
	expiresAt time.Time                                   // of action (zero: none)
	tokens    *tokenBucket
}

// stream is an open StreamRateLimitQuotas call and its receiver.
type stream struct {
	s      grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	cancel context.CancelFunc
	recv   chan *rlqspb.RateLimitQuotaResponse // closed when the stream ends
}

// New returns an Envoy that reports to the service on conn, at the
// instants now returns.
func New(cfg Config, conn grpc.ClientConnInterface, now func() time.Time) *Envoy {
	if cfg.Wait == 0 {
		cfg.Wait = 5 * time.Second
	}
	return &Envoy{cfg: cfg, conn: conn, now: now, buckets: make(map[string]*cached)}
}

// Close ends the stream.
func (e *Envoy) Close() {
	if e.stream != nil {
		e.stream.cancel()
		e.stream = nil
	}
}

// SetConn points the Envoy at another server (as its cluster's load
// balancer would after a restart); the open stream is closed.
func (e *Envoy) SetConn(conn grpc.ClientConnInterface) {
	e.Close()
	e.conn = conn
}

// Buckets returns how many buckets the filter caches.
func (e *Envoy) Buckets() int { return len(e.buckets) }

// Assignment returns the bucket's current action (nil when it has none,
// or is not cached).
func (e *Envoy) Assignment(bucket map[string]string) *rlqspb.RateLimitQuotaResponse_BucketAction {
	if b := e.buckets[key(bucket)]; b != nil {
		return b.action
	}
	return nil
}

// Request runs one request matched into bucket through the filter and
// reports whether it was allowed. Timers due at now fire first.
func (e *Envoy) Request(bucket map[string]string) bool {
	e.Tick()
	now := e.now()
	k := key(bucket)
	b := e.buckets[k]
	if b == nil {
		ok := !e.cfg.DenyWithoutAssignment
		b = &cached{id: &rlqspb.BucketId{Bucket: bucket}, lastReport: now}
		e.count(b, ok)
		e.buckets[k] = b
		if e.nextReport.IsZero() {
			e.nextReport = now.Add(e.cfg.ReportingInterval)
		}
		e.send([]*cached{b}, now)
		return ok
	}
	ok := e.decide(b, now)
	e.count(b, ok)
	return ok
}

// count records one decision.
func (e *Envoy) count(b *cached, ok bool) {
	if ok {
		b.allowed++
		e.Allowed++
	} else {
		b.denied++
		e.Denied++
	}
}

// decide applies b's action (or the no-assignment behavior) to one request.
func (e *Envoy) decide(b *cached, now time.Time) bool {
	s := b.action.GetQuotaAssignmentAction().GetRateLimitStrategy()
	if b.action == nil || s == nil {
		return !e.cfg.DenyWithoutAssignment
	}
	switch st := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return st.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		return b.tokens.consume(now)
	}
	return !e.cfg.DenyWithoutAssignment
}

// Tick fires the timers due at now: assignment and fallback expiries, then
// the report timer (every due interval, as a late timer fires once and
// re-arms).
func (e *Envoy) Tick() {
	now := e.now()
	for _, b := range e.buckets {
		if b.action != nil && !b.expiresAt.IsZero() && !now.Before(b.expiresAt) {
			e.expire(b)
		}
	}
	if !e.nextReport.IsZero() && !now.Before(e.nextReport) {
		for !now.Before(e.nextReport) {
			e.nextReport = e.nextReport.Add(e.cfg.ReportingInterval)
		}
		all := make([]*cached, 0, len(e.buckets))
		for _, b := range e.buckets {
			all = append(all, b)
		}
		slices.SortFunc(all, func(x, y *cached) int { return strings.Compare(key(x.id.Bucket), key(y.id.Bucket)) })
		e.send(all, now)
	}
}

// expire moves b from its assignment to the fallback (for its TTL), or
// from the fallback to no assignment.
func (e *Envoy) expire(b *cached) {
	if b.fallback || e.cfg.Fallback == nil {
		b.action, b.fallback, b.expiresAt, b.tokens = nil, false, time.Time{}, nil
		return
	}
	a := &rlqspb.RateLimitQuotaResponse_BucketAction{BucketId: b.id, BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{RateLimitStrategy: e.cfg.Fallback}}}
	e.apply(b, a, e.now())
	b.fallback, b.expiresAt = true, e.now().Add(e.cfg.FallbackTTL)
}

// send reports the buckets and applies the response.
func (e *Envoy) send(bs []*cached, now time.Time) {
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: e.cfg.Domain}
	for _, b := range bs {
		elapsed := now.Sub(b.lastReport).Truncate(time.Second)
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: b.id, TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
		})
		b.allowed, b.denied, b.lastReport = 0, 0, now
	}
	if e.stream == nil && !e.open() {
		e.Lost++
		return
	}
	e.Reports++
	if err := e.stream.s.Send(msg); err != nil {
		e.drop()
		e.Lost++
		return
	}
	select {
	case resp, ok := <-e.stream.recv:
		if !ok {
			e.drop()
			e.Lost++
			return
		}
		e.respond(resp)
	case <-time.After(e.cfg.Wait):
		e.drop()
		e.Lost++
	}
}

// open starts the stream.
func (e *Envoy) open() bool {
	ctx, cancel := context.WithCancel(context.Background())
	desc := &grpc.StreamDesc{StreamName: "StreamRateLimitQuotas", ServerStreams: true, ClientStreams: true}
	cs, err := e.conn.NewStream(ctx, desc, rlqspb.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName)
	if err != nil {
		cancel()
		return false
	}
	s := &stream{s: &grpc.GenericClientStream[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]{ClientStream: cs}, cancel: cancel, recv: make(chan *rlqspb.RateLimitQuotaResponse, 16)}
	go func() {
		defer close(s.recv)
		for {
			r, err := s.s.Recv()
			if err != nil {
				return
			}
			s.recv <- r
		}
	}()
	e.stream = s
	return true
}

// drop forgets a stream that failed (the filter's onRemoteClose).
func (e *Envoy) drop() {
	if e.stream != nil {
		e.stream.cancel()
		e.stream = nil
	}
}

// respond applies a response's actions, as onQuotaResponseImpl does.
func (e *Envoy) respond(resp *rlqspb.RateLimitQuotaResponse) {
	now := e.now()
	for _, a := range resp.GetBucketAction() {
		if len(a.GetBucketId().GetBucket()) == 0 {
			continue
		}
		k := key(a.GetBucketId().GetBucket())
		b := e.buckets[k]
		if b == nil {
			continue
		}
		if a.GetAbandonAction() != nil {
			delete(e.buckets, k)
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if qa == nil {
			continue
		}
		switch qa.GetRateLimitStrategy().GetStrategy().(type) {
		case *typev3.RateLimitStrategy_BlanketRule_, *typev3.RateLimitStrategy_TokenBucket:
		default:
			continue // requests_per_time_unit, or no strategy
		}
		e.apply(b, a, now)
		b.fallback = false
		b.expiresAt = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	}
}

// apply makes a b's action, keeping b's token bucket when the new one is
// the same by the filter's comparison.
func (e *Envoy) apply(b *cached, a *rlqspb.RateLimitQuotaResponse_BucketAction, now time.Time) {
	nt := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	old := b.action.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	switch {
	case nt == nil:
		b.tokens = nil
	case old == nil || b.tokens == nil || nt.GetMaxTokens() != old.GetMaxTokens() ||
		nt.GetTokensPerFill().GetValue() != old.GetTokensPerFill().GetValue() ||
		nt.GetFillInterval().GetNanos() != old.GetFillInterval().GetNanos():
		b.tokens = newTokenBucket(nt, now)
	}
	b.action = proto.Clone(a).(*rlqspb.RateLimitQuotaResponse_BucketAction)
}

// tokenBucket is Envoy's AtomicTokenBucketImpl: full at creation, refilled
// continuously.
type tokenBucket struct {
	max, tokens, rate float64 // rate per second
	at                time.Time
}

// newTokenBucket builds the filter's token bucket from an assignment: the
// fill interval in whole seconds (truncated).
func newTokenBucket(tb *typev3.TokenBucket, now time.Time) *tokenBucket {
	secs := int64(tb.GetFillInterval().AsDuration() / time.Second)
	rate := 0.0
	if secs > 0 {
		rate = float64(tb.GetTokensPerFill().GetValue()) / float64(secs)
	}
	return &tokenBucket{max: float64(tb.GetMaxTokens()), tokens: float64(tb.GetMaxTokens()), rate: rate, at: now}
}

// consume takes one token if there is one.
func (t *tokenBucket) consume(now time.Time) bool {
	if t == nil {
		return false
	}
	t.tokens = min(t.max, t.tokens+now.Sub(t.at).Seconds()*t.rate)
	t.at = now
	if t.tokens < 1 {
		return false
	}
	t.tokens--
	return true
}

// key names a bucket's entries in the cache.
func key(bucket map[string]string) string {
	ks := make([]string, 0, len(bucket))
	for k, v := range bucket {
		ks = append(ks, k+"\x00"+v)
	}
	slices.Sort(ks)
	return strings.Join(ks, "\x01")
}

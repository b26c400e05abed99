package metrics

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sync"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// outcome is the outcome label of sluice_decisions_total.
type outcome uint8

// The outcomes; docs/metrics.md says what each means.
const (
	outOK outcome = iota
	outOverLimit
	outShadowOverLimit
	outUnlimited
	outNoLimit
	outUnknownDomain
	outError
	outFailureAllow
	outFailureDeny
	outFailureLocal
	outInvalid
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"ok", "over_limit", "shadow_over_limit", "unlimited", "no_limit", "unknown_domain",
	"error", "failure_allow", "failure_deny", "failure_local", "invalid",
}

// String returns the label value.
func (o outcome) String() string { return outcomeNames[o] }

var _ service.Observer = (*Metrics)(nil)

// Descriptor implements service.Observer: it counts the descriptor's
// outcome, and the cost asked and denied per named rule and per
// detailed_metric descriptor.
func (m *Metrics) Descriptor(ev service.DescriptorEvent) {
	if m == nil {
		return
	}
	var d *domainStats
	if ev.Outcome == service.OutcomeUnknownDomain {
		d = m.anyDomain(ev.Domain)
	} else {
		d = m.knownDomain(ev.Domain)
	}
	o := classify(&ev)
	m.outcome(d, o).Inc()
	if ev.Override {
		m.observeOverride(&ev)
		if ev.OverrideClamped {
			m.overClamped.Inc()
		}
	}
	if o != outOK && o != outOverLimit && o != outShadowOverLimit {
		return
	}
	dec := &ev.Decision
	if len(dec.Outcomes) != len(ev.Rules) {
		return // a backend that answered without rules
	}
	if o == outOK && m.isNearLimit(&ev) {
		m.nearLimitCounter(d).Inc()
	}
	if ev.Cost.Refund || ev.Override {
		return // refunds are not hits; override rules are not the config's
	}
	if ev.Node != nil {
		m.observeNode(d, &ev, o)
	}
	n := float64(ev.Cost.N)
	for i := range ev.Rules {
		if ev.Rules[i].Name == "" {
			continue
		}
		p := m.rule(d, ev.Rules[i].Name)
		p.hits.Add(n)
		if !dec.Outcomes[i].Allowed {
			p.over.Add(n)
		}
	}
	if ev.Node != nil && (ev.Node.DetailedMetric || hasValueToMetric(ev.Node)) {
		m.observeDetailed(d, &ev, n)
	}
}

// classify maps a descriptor event to its outcome label.
func classify(ev *service.DescriptorEvent) outcome {
	switch ev.Outcome {
	case service.OutcomeUnknownDomain:
		return outUnknownDomain
	case service.OutcomeNoLimit:
		return outNoLimit
	case service.OutcomeUnlimited:
		return outUnlimited
	case service.OutcomeInvalid:
		return outInvalid
	}
	if ev.BackendErr != nil {
		switch ev.FailureMode {
		case descriptor.FailureAllow:
			return outFailureAllow
		case descriptor.FailureDeny:
			return outFailureDeny
		case descriptor.FailureLocal:
			return outFailureLocal
		}
		return outError
	}
	switch {
	case ev.Outcome == service.OutcomeOverLimit && ev.Shadow:
		return outShadowOverLimit
	case ev.Outcome == service.OutcomeOverLimit:
		return outOverLimit
	}
	return outOK
}

// isNearLimit reports whether an admitted descriptor's binding rule is
// near its limit, as envoyproxy/ratelimit decides it: what the rule has
// used (capacity - remaining) is above floor(capacity × NearLimitRatio).
// With the default 0.8 and a limit of 20, that is 3 or fewer left.
func (m *Metrics) isNearLimit(ev *service.DescriptorEvent) bool {
	return m.aboveNear(ev) > 0
}

// aboveNear is how far the binding rule's use (capacity - remaining) is
// above floor(capacity × NearLimitRatio), 0 when it is not.
func (m *Metrics) aboveNear(ev *service.DescriptorEvent) uint64 {
	b := ev.Decision.Binding
	if b < 0 || b >= len(ev.Rules) {
		return 0
	}
	capacity := ev.Rules[b].Capacity()
	remaining := ev.Decision.Outcomes[b].Remaining
	if capacity == 0 || remaining >= capacity {
		return 0
	}
	threshold := uint64(math.Floor(float64(capacity) * m.opts.NearLimitRatio))
	if used := capacity - remaining; used > threshold {
		return used - threshold
	}
	return 0
}

// hasValueToMetric reports whether n or one of its ancestors has
// value_to_metric.
func hasValueToMetric(n *descriptor.Node) bool {
	for ; n != nil; n = n.Parent {
		if n.ValueToMetric {
			return true
		}
	}
	return false
}

// labelBufs holds the scratch buffers descriptor labels are built in.
var labelBufs = sync.Pool{New: func() any { b := make([]byte, 0, MaxDescriptorLabelLen+utf8.UTFMax); return &b }}

// observeDetailed counts cost n against the descriptor label of ev: the
// path with every level's request value for detailed_metric nodes, and
// with the request value only at value_to_metric levels otherwise (as
// envoyproxy/ratelimit builds its stats keys).
func (m *Metrics) observeDetailed(d *domainStats, ev *service.DescriptorEvent, n float64) {
	bp := labelBufs.Get().(*[]byte)
	buf := appendLabel((*bp)[:0], ev.Node, ev.Entries, ev.Node.DetailedMetric, m.opts.DetailedValues)
	if len(buf) > MaxDescriptorLabelLen {
		cut := MaxDescriptorLabelLen
		for cut > 0 && !utf8.RuneStart(buf[cut]) {
			cut--
		}
		buf = buf[:cut]
	}
	p := m.descriptor(d, buf)
	*bp = buf[:0]
	labelBufs.Put(bp)
	p.hits.Add(n)
	if !ev.Decision.Allowed {
		p.over.Add(n)
	}
}

// appendLabel appends node's descriptor label to b: "key_value" per level
// joined by '.', where value is the request's value when all is set or the
// level's node has value_to_metric, and the configured value (empty for a
// key-only node, the pattern for a wildcard) otherwise. It stops early once
// b is past MaxDescriptorLabelLen.
func appendLabel(b []byte, node *descriptor.Node, entries []descriptor.Entry, all bool, values DetailedValues) []byte {
	if node.Parent != nil {
		b = appendLabel(b, node.Parent, entries, all, values)
		if len(b) > MaxDescriptorLabelLen {
			return b
		}
		b = append(b, '.')
	}
	b = append(b, node.Key...)
	v := node.Value
	// A share_threshold level keeps its pattern: every matching value
	// shares one counter, and the reference's stats key names the pattern.
	if (all || node.ValueToMetric) && !node.ShareThreshold && node.Depth >= 1 && node.Depth <= len(entries) {
		if v = entries[node.Depth-1].Value; v != "" {
			return appendValue(append(b, '_'), v, values)
		}
	}
	if v != "" {
		b = append(b, '_')
		b = append(b, v...)
	}
	return b
}

// appendValue appends a request's value v as values says.
func appendValue(b []byte, v string, values DetailedValues) []byte {
	switch values {
	case DetailedHash:
		sum := sha256.Sum256([]byte(v))
		return hex.AppendEncode(append(b, "h:"...), sum[:8])
	case DetailedTruncate:
		if len(v) > TruncatedValueLen {
			cut := TruncatedValueLen
			for cut > 0 && !utf8.RuneStart(v[cut]) {
				cut--
			}
			return append(append(b, v[:cut]...), "…"...)
		}
	}
	return append(b, v...)
}

// Request implements service.Observer: it counts the call by gRPC code,
// calls answered OVER_LIMIT, calls the global shadow mode turned OK, and a
// decision with outcome "error" for every call that failed after its
// request was accepted (backend failure in a failure_mode error domain,
// cancellation, internal error).
func (m *Metrics) Request(ev service.RequestEvent) {
	if m == nil {
		return
	}
	code := codes.OK
	if ev.Err != nil {
		code = status.Code(ev.Err)
	}
	if int(code) < len(m.codeCounters) {
		m.codeCounters[code].Inc()
	} else {
		m.codeCounters[codes.Unknown].Inc()
	}
	switch {
	case ev.Err != nil:
		if code != codes.InvalidArgument {
			m.outcome(m.anyDomain(ev.Domain), outError).Inc()
		}
	case ev.Code == rlsv3.RateLimitResponse_OVER_LIMIT:
		m.requestsOver.Inc()
	}
	if ev.ShadowForced {
		m.shadowForced.Inc()
	}
	if ev.Refused != "" {
		m.refused.WithLabelValues(ev.Refused).Inc()
	}
}

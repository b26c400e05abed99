package service

import (
	"math"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// headers builds response_headers_to_add for the decided items. denied says
// whether the response denies the request (for Retry-After).
func (s *Service) headers(w *work, views []view, denied bool) []*corev3.HeaderValue {
	h := &s.opts.Headers
	pick := pickHeaderStatus(w.items, views)
	if pick < 0 {
		return nil
	}
	v, it := &views[pick], &w.items[pick]
	out := make([]*corev3.HeaderValue, 0, 6)
	reset := ceilSeconds(v.reset)
	out = append(out,
		header(h.LimitHeader, itoa(int64(clamp32(v.rule.Limit)))),
		header(h.RemainingHeader, itoa(int64(v.remaining))),
		header(h.ResetHeader, itoa(reset)))
	if h.IETF {
		var b strings.Builder
		for i := range it.rules {
			if i > 0 {
				b.WriteString(", ")
			}
			r := &it.rules[i]
			sfName(&b, r)
			b.WriteString(";q=")
			b.WriteString(strconv.FormatUint(r.Limit, 10))
			b.WriteString(";w=")
			b.WriteString(itoa(int64(r.Period().Seconds())))
		}
		out = append(out, header("RateLimit-Policy", b.String()))
		b.Reset()
		sfName(&b, v.rule)
		b.WriteString(";r=")
		b.WriteString(itoa(int64(v.remaining)))
		b.WriteString(";t=")
		b.WriteString(itoa(reset))
		out = append(out, header("RateLimit", b.String()))
	}
	if h.RetryAfter && denied {
		var wait int64
		for i := range w.items {
			if w.items[i].over {
				wait = max(wait, ceilSeconds(views[i].reset))
			}
		}
		out = append(out, header("Retry-After", itoa(wait)))
	}
	return out
}

// requestHeaders builds request_headers_to_add: the Limit, Remaining and
// Reset values of the status the response headers describe, under the
// request header names.
func (s *Service) requestHeaders(w *work, views []view) []*corev3.HeaderValue {
	h := &s.opts.Headers
	pick := pickHeaderStatus(w.items, views)
	if pick < 0 {
		return nil
	}
	v := &views[pick]
	return []*corev3.HeaderValue{
		header(h.RequestLimitHeader, itoa(int64(clamp32(v.rule.Limit)))),
		header(h.RequestRemainingHeader, itoa(int64(v.remaining))),
		header(h.RequestResetHeader, itoa(ceilSeconds(v.reset))),
	}
}

// pickHeaderStatus chooses the status the headers describe, as the
// reference does: the lowest limit_remaining among statuses with a limit
// (the first on ties), overridden by any non-quota OVER_LIMIT status (the
// last one wins). -1 when no status has a limit.
func pickHeaderStatus(items []item, views []view) int {
	pick, least := -1, uint32(math.MaxUint32)
	for i := range items {
		if views[i].rule != nil && views[i].remaining < least {
			pick, least = i, views[i].remaining
		}
		if items[i].over && !items[i].quota && views[i].rule != nil { // an invalid descriptor has no limit to describe
			pick, least = i, 0
		}
	}
	return pick
}

// sfName returns the name of r as an HTTP structured-field String: its
// Name when that holds only printable ASCII, else its rule ID.
func sfName(b *strings.Builder, r *limit.Rule) {
	name := r.Name
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			name = ""
			break
		}
	}
	if name == "" {
		name = r.ID()
	}
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(name[i])
	}
	b.WriteByte('"')
}

func header(key, value string) *corev3.HeaderValue {
	return &corev3.HeaderValue{Key: key, Value: value}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

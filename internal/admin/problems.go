package admin

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// maxProblems bounds the problem reasons counted apart; the reasons are a
// fixed set (gRPC codes, refusal reasons, failure modes), so this is only
// a guard.
const maxProblems = 48

// maxProblemText bounds the last error text kept per reason, in bytes.
const maxProblemText = 300

// problemSet counts what went wrong, per reason and rate bucket.
type problemSet struct {
	mu     sync.Mutex
	byName atomic.Pointer[map[string]*problem]
}

// problem is one reason's counts and the last error it saw.
type problem struct {
	name, meaning string
	counts        [rateBuckets]tally
	last          atomic.Pointer[lastError]
}

// lastError is a problem's most recent error text and when it came.
type lastError struct {
	text string
	at   time.Time
}

// Problem is one reason calls or descriptors went wrong, for the page and
// /api/v1/status.
type Problem struct {
	// Reason names it: "call failed: Unavailable", "call refused:
	// descriptors", "backend failed: failure_mode allow", ...
	Reason string `json:"reason"`
	// Meaning says what it does to traffic.
	Meaning string `json:"meaning"`
	// PerSecond is the rate over the last full 10 s; Last15m the count
	// over the last 15 minutes.
	PerSecond float64 `json:"per_second"`
	Last15m   uint64  `json:"last_15m"`
	// LastError is the last error's text (cut to 300 bytes), LastAt when.
	LastError string    `json:"last_error,omitempty"`
	LastAt    time.Time `json:"last_at,omitzero"`
}

// requestProblem counts a call that failed or was refused.
func (o *Observer) requestProblem(ev *service.RequestEvent) {
	text := ""
	if ev.Err != nil {
		text = status.Convert(ev.Err).Message()
	}
	switch {
	case ev.Refused != "":
		o.count("call refused: "+ev.Refused, "answered InvalidArgument for a request bound: Envoy applies no limit to it unless failure_mode_deny is set", text)
	case status.Code(ev.Err) == codes.InvalidArgument:
		o.count("call invalid", "a malformed request (no domain, no descriptors), answered InvalidArgument: Envoy applies no limit to it unless failure_mode_deny is set", text)
	case status.Code(ev.Err) == codes.Canceled:
		o.count("call canceled", "the caller went away before the answer (Envoy's timeout, or the client's)", text)
	default:
		o.count("call failed: "+status.Code(ev.Err).String(), "no answer: Envoy applies no limit unless failure_mode_deny is set (failure_mode error, the default, when the backend cannot decide)", text)
	}
}

// descriptorProblem counts a descriptor the backend could not decide (the
// domain's failure mode answered it) or that was invalid.
func (o *Observer) descriptorProblem(ev *service.DescriptorEvent) {
	if ev.Outcome == service.OutcomeInvalid {
		o.count("descriptor invalid", "a malformed descriptor, answered OVER_LIMIT without a decision", "")
		return
	}
	switch ev.FailureMode {
	case descriptor.FailureAllow:
		o.count("backend failed: failure_mode allow", "answered OK without a limit", ev.BackendErr.Error())
	case descriptor.FailureDeny:
		o.count("backend failed: failure_mode deny", "answered OVER_LIMIT", ev.BackendErr.Error())
	case descriptor.FailureLocal:
		o.count("backend failed: failure_mode local", "decided in this instance's memory, each limit divided by the instance count", ev.BackendErr.Error())
	}
	// failure_mode error fails the call, which Request counts.
}

// count adds one to reason name's current bucket and keeps text as its
// last error when not empty.
func (o *Observer) count(name, meaning, text string) {
	now := o.now()
	p := o.problems.get(name, meaning)
	if p == nil {
		return
	}
	n := now.UnixNano() / int64(rateBucket)
	p.counts[int(n%rateBuckets)].add(n)
	if text != "" {
		if len(text) > maxProblemText {
			text = strings.ToValidUTF8(text[:maxProblemText], "") + "…"
		}
		p.last.Store(&lastError{text: text, at: now.UTC()})
	}
}

// get returns the problem called name, creating it (nil past maxProblems).
func (ps *problemSet) get(name, meaning string) *problem {
	if m := ps.byName.Load(); m != nil {
		if p := (*m)[name]; p != nil {
			return p
		}
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var old map[string]*problem
	if m := ps.byName.Load(); m != nil {
		old = *m
	}
	if p := old[name]; p != nil {
		return p
	}
	if len(old) >= maxProblems {
		return nil
	}
	next := make(map[string]*problem, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	p := &problem{name: name, meaning: meaning}
	next[name] = p
	ps.byName.Store(&next)
	return p
}

// Problems returns every reason seen, with its rate over the last full
// bucket and its count over the last 15 minutes, sorted by reason.
func (o *Observer) Problems() []Problem {
	out := []Problem{}
	if o == nil {
		return out
	}
	m := o.problems.byName.Load()
	if m == nil {
		return out
	}
	cur := o.now().UnixNano() / int64(rateBucket)
	for _, p := range *m {
		pr := Problem{Reason: p.name, Meaning: p.meaning}
		last := cur - 1
		pr.PerSecond = float64(p.counts[int(last%rateBuckets)].get(last)) / rateBucket.Seconds()
		for n := cur - rateBuckets + 1; n <= cur; n++ {
			pr.Last15m += p.counts[int(n%rateBuckets)].get(n)
		}
		if le := p.last.Load(); le != nil {
			pr.LastError, pr.LastAt = le.text, le.at
		}
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b Problem) int { return strings.Compare(a.Reason, b.Reason) })
	return out
}

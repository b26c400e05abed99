package admin

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/hitters"
	"github.com/sluice-rl/sluice/internal/service"
)

// Rate history shape: 15 minutes of 10-second buckets.
const (
	rateBucket  = 10 * time.Second
	rateBuckets = 90
	// maxRateDomains bounds the domains with their own series; decisions of
	// further domains are counted under otherDomain.
	maxRateDomains = 32
	otherDomain    = "(other)"
)

// Observer is a service.Observer feeding the admin listener: the
// decisions/s and denials/s history per domain and the heavy hitters.
// Only configured domains are counted (an unknown domain is whatever a
// client sent). It is safe for concurrent use: a descriptor is counted
// with one clock read and atomic adds, under no lock of the Observer's
// (the tracker locks one of its shards).
type Observer struct {
	now   func() time.Time
	top   *hitters.Tracker
	names nameCache
	// doms maps a domain to its series: read without a lock, replaced
	// (copied with one more name) under mu.
	doms atomic.Pointer[map[string]*series]
	mu   sync.Mutex
	// all is every series, each once, in the order created; other, once
	// there are maxRateDomains domains, the series of every further one.
	// Both guarded by mu.
	all   []*series
	other *series
	// problems are the calls and descriptors that went wrong, by reason.
	problems problemSet
}

// series is one domain's counts per rate bucket: slot i holds bucket
// number n when n is i modulo rateBuckets, tagged with n (tally).
type series struct {
	name                       string
	decisions, denials, shadow [rateBuckets]tally
}

// tally is one bucket's count, tagged with its bucket number: the bucket
// number (modulo 2³²) in the high 32 bits, the count in the low 32, in
// one word so that a count and the move to a new bucket are each one
// atomic operation. A bucket counts at most 2³²-1 events (430 million
// per second for 10 s).
type tally struct{ v atomic.Uint64 }

// add counts one event in bucket n; a slot holding another bucket (older,
// or newer after the clock was set back) starts bucket n at one. An add
// racing with that start counts in whichever bucket the slot then holds.
func (t *tally) add(n int64) {
	tag := uint32(n)
	for {
		old := t.v.Load()
		if uint32(old>>32) == tag {
			t.v.Add(1)
			return
		}
		if t.v.CompareAndSwap(old, uint64(tag)<<32|1) {
			return
		}
	}
}

// get returns bucket n's count, 0 when the slot holds another bucket.
func (t *tally) get(n int64) uint64 {
	v := t.v.Load()
	if uint32(v>>32) != uint32(n) {
		return 0
	}
	return uint64(uint32(v))
}

var _ service.Observer = (*Observer)(nil)

// NewObserver returns an Observer counting into top; now nil means
// time.Now.
func NewObserver(top *hitters.Tracker, now func() time.Time) *Observer {
	if now == nil {
		now = time.Now
	}
	o := &Observer{now: now, top: top}
	o.doms.Store(&map[string]*series{})
	return o
}

// Descriptor counts one decided descriptor: a decision, a denial or a
// shadow-mode denial (a node's shadow_mode answered OK; not a denial, and
// not in the top denied), and a problem when the backend failed or the
// descriptor was invalid.
func (o *Observer) Descriptor(ev service.DescriptorEvent) {
	if ev.BackendErr != nil || ev.Outcome == service.OutcomeInvalid {
		o.descriptorProblem(&ev)
	}
	if ev.Outcome != service.OutcomeOK && ev.Outcome != service.OutcomeOverLimit {
		return
	}
	shadowed := ev.Outcome == service.OutcomeOverLimit && ev.Shadow
	denied := ev.Outcome == service.OutcomeOverLimit && !ev.Shadow
	now := o.now()
	if !ev.Cost.Refund {
		binding, reset := "", time.Duration(0)
		if b := ev.Decision.Binding; denied && b >= 0 && b < len(ev.Rules) {
			binding = o.names.name(ev.Rules[b], ev.Override)
			if b < len(ev.Decision.Outcomes) {
				reset = ev.Decision.Outcomes[b].Reset
			}
		}
		o.top.RecordAt(now, ev.Domain, ev.Entries, o.names.set(ev.Rules, ev.Override), ev.Cost.N, denied, binding, reset)
	}

	n := now.UnixNano() / int64(rateBucket)
	i := int(n % rateBuckets)
	s := (*o.doms.Load())[ev.Domain]
	if s == nil {
		s = o.series(ev.Domain)
	}
	s.decisions[i].add(n)
	switch {
	case denied:
		s.denials[i].add(n)
	case shadowed:
		s.shadow[i].add(n)
	}
}

// maxRateNames bounds the names the domain map holds: the domains with
// their own series, and as many more naming otherDomain's, so that a
// domain beyond maxRateDomains is found without the lock too.
const maxRateNames = 4 * maxRateDomains

// series returns domain's series, adding it (or, beyond maxRateDomains
// domains, naming otherDomain's for it) when the map lacks it.
func (o *Observer) series(domain string) *series {
	o.mu.Lock()
	defer o.mu.Unlock()
	doms := *o.doms.Load()
	if s := doms[domain]; s != nil {
		return s
	}
	var s *series
	switch {
	case len(o.all) < maxRateDomains:
		s = &series{name: domain}
		o.all = append(o.all, s)
	case o.other == nil:
		o.other = &series{name: otherDomain}
		o.all = append(o.all, o.other)
		s = o.other
	default:
		s = o.other
	}
	if len(doms) >= maxRateNames {
		return s
	}
	next := make(map[string]*series, len(doms)+2)
	for k, v := range doms {
		next[k] = v
	}
	next[domain] = s
	o.doms.Store(&next)
	return s
}

// Request counts a call that failed or was refused, by reason (rates
// count descriptors).
func (o *Observer) Request(ev service.RequestEvent) {
	if ev.Err != nil || ev.Refused != "" {
		o.requestProblem(&ev)
	}
}

// ruleName names a rule for people: its name, else its id (an override
// rule is named "override <id>").
func ruleName(name, id string, override bool) string {
	switch {
	case name != "":
		return name
	case override:
		return "override " + id
	}
	return id
}

// Rate is one domain's history, oldest point first.
type Rate struct {
	Domain string `json:"domain"`
	// Start is the start of the first point; each point covers 10 s.
	Start time.Time `json:"start"`
	// StepSeconds is the width of each point.
	StepSeconds float64 `json:"step_seconds"`
	// Decisions, Denials and Shadow are per-second rates, one per point:
	// every decided descriptor, those answered OVER_LIMIT, and those a
	// node's shadow_mode answered OK instead (not denials).
	Decisions []float64 `json:"decisions_per_second"`
	Denials   []float64 `json:"denials_per_second"`
	Shadow    []float64 `json:"shadow_denials_per_second"`
}

// Rates returns every domain's last 15 minutes, the current (partial)
// bucket excluded, sorted by domain.
func (o *Observer) Rates() []Rate {
	now := o.now()
	cur := now.UnixNano() / int64(rateBucket)
	first := cur - rateBuckets + 1
	o.mu.Lock()
	all := slices.Clone(o.all)
	o.mu.Unlock()
	out := make([]Rate, 0, len(all))
	for _, s := range all {
		r := Rate{Domain: s.name, Start: time.Unix(0, first*int64(rateBucket)).UTC(), StepSeconds: rateBucket.Seconds(),
			Decisions: make([]float64, rateBuckets-1), Denials: make([]float64, rateBuckets-1), Shadow: make([]float64, rateBuckets-1)}
		for k := range rateBuckets - 1 {
			n := first + int64(k)
			i := int(n % rateBuckets)
			r.Decisions[k] = float64(s.decisions[i].get(n)) / rateBucket.Seconds()
			r.Denials[k] = float64(s.denials[i].get(n)) / rateBucket.Seconds()
			r.Shadow[k] = float64(s.shadow[i].get(n)) / rateBucket.Seconds()
		}
		out = append(out, r)
	}
	sortRates(out)
	return out
}

// Tee returns an Observer telling both a and b (either may be nil).
func Tee(a, b service.Observer) service.Observer {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return tee{a, b}
}

type tee struct{ a, b service.Observer }

func (t tee) Descriptor(ev service.DescriptorEvent) { t.a.Descriptor(ev); t.b.Descriptor(ev) }
func (t tee) Request(ev service.RequestEvent)       { t.a.Request(ev); t.b.Request(ev) }

package admin

import (
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/internal/hitters"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/limit"
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
// client sent). It is safe for concurrent use.
type Observer struct {
	now  func() time.Time
	top  *hitters.Tracker
	mu   sync.Mutex
	doms map[string]*series
}

// series is one domain's counts per rate bucket; slot i holds bucket
// number nums[i].
type series struct {
	decisions, denials [rateBuckets]uint64
	nums               [rateBuckets]int64
}

var _ service.Observer = (*Observer)(nil)

// NewObserver returns an Observer counting into top; now nil means
// time.Now.
func NewObserver(top *hitters.Tracker, now func() time.Time) *Observer {
	if now == nil {
		now = time.Now
	}
	return &Observer{now: now, top: top, doms: map[string]*series{}}
}

// Descriptor counts one decided descriptor.
func (o *Observer) Descriptor(ev service.DescriptorEvent) {
	if ev.Outcome != service.OutcomeOK && ev.Outcome != service.OutcomeOverLimit {
		return
	}
	denied := ev.Outcome == service.OutcomeOverLimit
	if !ev.Cost.Refund {
		binding, reset := "", time.Duration(0)
		if b := ev.Decision.Binding; denied && b >= 0 && b < len(ev.Rules) {
			binding = ruleName(ev.Rules[b].Name, ev.Rules[b].ID(), ev.Override)
			if b < len(ev.Decision.Outcomes) {
				reset = ev.Decision.Outcomes[b].Reset
			}
		}
		o.top.Record(ev.Domain, ev.Entries, ruleSet(ev.Rules, ev.Override), ev.Cost.N, denied, binding, reset)
	}

	now := o.now()
	n := now.UnixNano() / int64(rateBucket)
	i := int(n % rateBuckets)
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.doms[ev.Domain]
	if s == nil {
		name := ev.Domain
		if len(o.doms) >= maxRateDomains {
			name = otherDomain
		}
		if s = o.doms[name]; s == nil {
			s = &series{}
			o.doms[name] = s
		}
	}
	if s.nums[i] != n {
		s.nums[i], s.decisions[i], s.denials[i] = n, 0, 0
	}
	s.decisions[i]++
	if denied {
		s.denials[i]++
	}
}

// Request does nothing: rates count descriptors.
func (o *Observer) Request(service.RequestEvent) {}

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

// ruleSet names the rules decided together: their names joined by "+".
func ruleSet(rules []limit.Rule, override bool) string {
	if len(rules) == 1 {
		return ruleName(rules[0].Name, rules[0].ID(), override)
	}
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = ruleName(r.Name, r.ID(), override)
	}
	return strings.Join(names, "+")
}

// Rate is one domain's history, oldest point first.
type Rate struct {
	Domain string `json:"domain"`
	// Start is the start of the first point; each point covers 10 s.
	Start time.Time `json:"start"`
	// StepSeconds is the width of each point.
	StepSeconds float64 `json:"step_seconds"`
	// Decisions and Denials are per-second rates, one per point.
	Decisions []float64 `json:"decisions_per_second"`
	Denials   []float64 `json:"denials_per_second"`
}

// Rates returns every domain's last 15 minutes, the current (partial)
// bucket excluded, sorted by domain.
func (o *Observer) Rates() []Rate {
	now := o.now()
	cur := now.UnixNano() / int64(rateBucket)
	first := cur - rateBuckets + 1
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Rate, 0, len(o.doms))
	for name, s := range o.doms {
		r := Rate{Domain: name, Start: time.Unix(0, first*int64(rateBucket)).UTC(), StepSeconds: rateBucket.Seconds(),
			Decisions: make([]float64, rateBuckets-1), Denials: make([]float64, rateBuckets-1)}
		for k := range rateBuckets - 1 {
			n := first + int64(k)
			i := int(n % rateBuckets)
			if s.nums[i] == n {
				r.Decisions[k] = float64(s.decisions[i]) / rateBucket.Seconds()
				r.Denials[k] = float64(s.denials[i]) / rateBucket.Seconds()
			}
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

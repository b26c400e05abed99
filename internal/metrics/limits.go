package metrics

import (
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// MaxOverrideDescriptors bounds, per domain, the descriptor label values of
// sluice_override_limit: request descriptors carrying a `limit` override
// are labelled by their keys (never their values), and past this many
// distinct key paths a domain's further ones fold into OtherLabel.
const MaxOverrideDescriptors = 100

// ruleLimitLabels are the labels of the configured-limit gauges: the same
// domain and descriptor (node path) as the per-node counters, so that a
// PromQL expression joins them on (domain, descriptor), plus the rule.
var ruleLimitLabels = []string{"domain", "descriptor", "rule", "algorithm", "unit"}

// limitGauges are the families that export the configured limits.
type limitGauges struct {
	limit  *prometheus.GaugeVec // domain, descriptor, rule, algorithm, unit
	window *prometheus.GaugeVec // domain, descriptor, rule, algorithm, unit
	burst  *prometheus.GaugeVec // domain, descriptor, rule, algorithm, unit
	// override is the last limit override seen per domain, descriptor keys
	// and unit.
	override *prometheus.GaugeVec // domain, descriptor, unit

	mu sync.Mutex
	// series are the label values of the rule gauges set by the last
	// ConfigApplied, so that the next one deletes those it does not set.
	series map[[5]string]bool
	// overridePaths maps a configured domain to its override gauges.
	overridePaths cowMap[*overrideDomain]
}

// overrideDomain holds one domain's override gauges, keyed by key path,
// a zero byte and the unit's number.
type overrideDomain struct {
	label  string
	gauges cowMap[prometheus.Gauge]
}

// register creates the families on f.
func (g *limitGauges) register(f *registrar) {
	g.limit = f.gaugeVec("sluice_rule_limit",
		"The limit of each configured rule: requests_per_unit, the cost admitted per window of sluice_rule_window_seconds, "+
			"by domain, descriptor (node path), rule (its name, or its state id when unnamed), algorithm and unit.", ruleLimitLabels...)
	g.window = f.gaugeVec("sluice_rule_window_seconds",
		"The window of each configured rule in seconds: unit_multiplier × unit (a month counts 30 days, a year 365).", ruleLimitLabels...)
	g.burst = f.gaugeVec("sluice_rule_burst",
		"The most cost each configured rule holds at once: burst for token_bucket, leaky_bucket and gcra (requests_per_unit when unset), requests_per_unit for the window algorithms.",
		ruleLimitLabels...)
	g.override = f.gaugeVec("sluice_override_limit",
		"The requests_per_unit of the last limit override a request descriptor carried, per one unit, by domain, descriptor keys (no values) and unit.",
		"domain", "descriptor", "unit")
	g.series = map[[5]string]bool{}
}

// ruleLabel is the rule label of r: its name, or its state id for an
// unnamed rule (rules of one node have distinct ids).
func ruleLabel(r *limit.Rule) string {
	if r.Name != "" {
		return labelValue(r.Name, MaxDescriptorLabelLen)
	}
	return r.ID()
}

// applyLimits sets the rule gauges to c's rules and deletes the series of
// rules c no longer holds. Nodes of one path (see nodeCounters) and rules
// of one node cut to the same name share a series: the last one written
// wins.
func (g *limitGauges) applyLimits(c *descriptor.Config) {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := map[[5]string]bool{}
	for _, name := range c.Domains() {
		dl := labelValue(name, MaxDescriptorLabelLen)
		c.Domain(name).Walk(func(n *descriptor.Node) {
			if len(n.Rules) == 0 {
				return
			}
			path := labelValue(n.Path(), MaxDescriptorLabelLen)
			for i := range n.Rules {
				r := &n.Rules[i]
				l := [5]string{dl, path, ruleLabel(r), r.Algorithm.String(), r.Unit.String()}
				next[l] = true
				g.limit.WithLabelValues(l[:]...).Set(float64(r.Limit))
				g.window.WithLabelValues(l[:]...).Set(r.Period().Seconds())
				g.burst.WithLabelValues(l[:]...).Set(float64(r.Capacity()))
			}
		})
	}
	for l := range g.series {
		if !next[l] {
			g.limit.DeleteLabelValues(l[:]...)
			g.window.DeleteLabelValues(l[:]...)
			g.burst.DeleteLabelValues(l[:]...)
		}
	}
	g.series = next
	// Override series of domains c no longer holds go too.
	removed := g.overridePaths.keepOnly(func(name string) bool { return c.Domain(name) != nil })
	for _, od := range removed {
		g.override.DeletePartialMatch(prometheus.Labels{"domain": od.label})
	}
}

// observeOverride sets the override gauge of ev's domain, key path and unit
// to the override's limit per one unit. Only configured domains have
// override series, at most MaxOverrideDescriptors key path and unit pairs
// each; past that a domain's new pairs share descriptor OtherLabel.
func (m *Metrics) observeOverride(ev *service.DescriptorEvent) {
	if len(ev.Rules) != 1 || ev.Outcome == service.OutcomeUnknownDomain {
		return
	}
	r := &ev.Rules[0]
	if r.Unit <= limit.UnitUnknown || r.Unit > limit.Year {
		return
	}
	od := m.limits.overridePaths.loadOrCreate(ev.Domain, func() *overrideDomain {
		return &overrideDomain{label: labelValue(ev.Domain, MaxDescriptorLabelLen)}
	})
	bp := labelBufs.Get().(*[]byte)
	buf := (*bp)[:0]
	for i := range ev.Entries {
		if i > 0 {
			buf = append(buf, '.')
		}
		buf = append(buf, ev.Entries[i].Key...)
		if len(buf) > MaxDescriptorLabelLen {
			break
		}
	}
	if len(buf) > MaxDescriptorLabelLen {
		cut := MaxDescriptorLabelLen
		for cut > 0 && !utf8.RuneStart(buf[cut]) {
			cut--
		}
		buf = buf[:cut]
	}
	path := len(buf)
	buf = append(buf, 0, byte(r.Unit))
	gauge, ok := od.gauges.loadBytes(buf)
	if !ok {
		key, label := string(buf), string(buf[:path])
		if od.gauges.len() >= MaxOverrideDescriptors {
			key, label = OtherLabel+string(buf[path:]), OtherLabel
		}
		gauge = od.gauges.loadOrCreate(key, func() prometheus.Gauge {
			return m.limits.override.WithLabelValues(od.label, labelValue(label, MaxDescriptorLabelLen), r.Unit.String())
		})
	}
	*bp = buf[:0]
	labelBufs.Put(bp)
	gauge.Set(float64(r.Limit) / float64(max(r.Multiplier, 1)))
}

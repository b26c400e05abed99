package metrics

import (
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// cowMap is a string-keyed map for data that is written rarely (once per
// domain, rule name, descriptor label) and read on every request. Readers
// load an immutable map through an atomic pointer: no lock, no allocation.
// Writers copy the map under mu.
type cowMap[V any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]V]
}

// load returns the value for k.
func (c *cowMap[V]) load(k string) (V, bool) {
	if p := c.m.Load(); p != nil {
		v, ok := (*p)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// loadBytes is load for a key held in a byte slice; the conversion in the
// index expression does not allocate.
func (c *cowMap[V]) loadBytes(k []byte) (V, bool) {
	if p := c.m.Load(); p != nil {
		v, ok := (*p)[string(k)]
		return v, ok
	}
	var zero V
	return zero, false
}

// loadOrCreate returns the value for k, storing mk() first if there is
// none; mk runs at most once per key.
func (c *cowMap[V]) loadOrCreate(k string, mk func() V) V {
	if v, ok := c.load(k); ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.load(k); ok {
		return v
	}
	v := mk()
	c.storeLocked(k, v)
	return v
}

// snapshot returns the entries; the map must not be changed.
func (c *cowMap[V]) snapshot() map[string]V {
	if p := c.m.Load(); p != nil {
		return *p
	}
	return nil
}

// len returns the number of entries.
func (c *cowMap[V]) len() int {
	if p := c.m.Load(); p != nil {
		return len(*p)
	}
	return 0
}

// keepOnly removes every entry whose key keep rejects, and returns the
// removed ones.
func (c *cowMap[V]) keepOnly(keep func(k string) bool) map[string]V {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keepOnlyLocked(func(k string, _ V) bool { return keep(k) })
}

// keepOnlyLocked is keepOnly for a caller that holds c.mu; keep also
// sees the value.
func (c *cowMap[V]) keepOnlyLocked(keep func(k string, v V) bool) map[string]V {
	p := c.m.Load()
	if p == nil {
		return nil
	}
	next := make(map[string]V, len(*p))
	removed := make(map[string]V)
	for k, v := range *p {
		if keep(k, v) {
			next[k] = v
		} else {
			removed[k] = v
		}
	}
	if len(removed) > 0 {
		c.m.Store(&next)
	}
	return removed
}

// storeLocked adds k → v. The caller holds c.mu.
func (c *cowMap[V]) storeLocked(k string, v V) {
	var next map[string]V
	if p := c.m.Load(); p != nil {
		next = make(map[string]V, len(*p)+1)
		for k, v := range *p {
			next[k] = v
		}
	} else {
		next = make(map[string]V, 1)
	}
	next[k] = v
	c.m.Store(&next)
}

// labelValue makes s usable as a Prometheus label value: valid UTF-8 (the
// client library rejects anything else) of at most max bytes, cut at a
// character boundary.
func labelValue(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// domainStats holds one domain label's pre-resolved counters.
type domainStats struct {
	label string
	// unknown: the domain was not configured when its counters were
	// created, so it counts against Options.MaxUnknownDomains and a
	// configuration change does not drop it. Guarded by Metrics.domains.mu.
	unknown  bool
	outcomes [numOutcomes]atomic.Pointer[prometheus.Counter]
	near     atomic.Pointer[prometheus.Counter]
	rules    cowMap[*pair]
	nodes    cowMap[*nodeStats]
	detailed cowMap[*pair]
	// detailedOther is where descriptors fold past the cap, created lazily.
	detailedOther atomic.Pointer[pair]
	// foldLogged: the first fold past the cap was logged.
	foldLogged atomic.Bool
}

// pair is a hits counter and an over-limit counter.
type pair struct {
	hits, over prometheus.Counter
}

// newDomainStats returns the counters of domain label l (already
// sanitized).
func (m *Metrics) newDomainStats(l string) *domainStats {
	return &domainStats{label: l}
}

// knownDomain returns the counters of a configured domain, creating them on
// first use. Configured domains are bounded by the configuration, so they
// are never folded.
func (m *Metrics) knownDomain(name string) *domainStats {
	if d, ok := m.domains.load(name); ok {
		return d
	}
	return m.addDomain(name, false)
}

// anyDomain returns the counters of a domain that may not be configured:
// past MaxUnknownDomains such domains share the OtherLabel counters.
func (m *Metrics) anyDomain(name string) *domainStats {
	if d, ok := m.domains.load(name); ok {
		return d
	}
	return m.addDomain(name, true)
}

// addDomain creates the counters of domain name.
func (m *Metrics) addDomain(name string, unknown bool) *domainStats {
	m.domains.mu.Lock()
	defer m.domains.mu.Unlock()
	if d, ok := m.domains.load(name); ok {
		return d
	}
	if unknown {
		if m.unknowns >= m.opts.MaxUnknownDomains {
			if !m.folded {
				m.folded = true
				m.log.WithFields(logrus.Fields{"domain": labelValue(name, MaxDescriptorLabelLen), "cap": m.opts.MaxUnknownDomains}).Warn(
					"metrics: more domains that are not configured than the cap; their decisions are counted under domain=\"" +
						OtherLabel + "\" from now on (logged once per process; the cap is fixed)")
			}
			return m.other
		}
		m.unknowns++
	}
	d := m.newDomainStats(labelValue(name, MaxDescriptorLabelLen))
	d.unknown = unknown
	m.domains.storeLocked(name, d)
	return d
}

// outcome returns d's counter for outcome o.
func (m *Metrics) outcome(d *domainStats, o outcome) prometheus.Counter {
	if c := d.outcomes[o].Load(); c != nil {
		return *c
	}
	// WithLabelValues returns the same child every time, so racing
	// creators store equal values.
	c := m.decisions.WithLabelValues(d.label, o.String())
	d.outcomes[o].Store(&c)
	return c
}

// nearLimitCounter returns d's near-limit counter.
func (m *Metrics) nearLimitCounter(d *domainStats) prometheus.Counter {
	if c := d.near.Load(); c != nil {
		return *c
	}
	c := m.nearLimit.WithLabelValues(d.label)
	d.near.Store(&c)
	return c
}

// rule returns d's counters for the rule called name (not empty).
func (m *Metrics) rule(d *domainStats, name string) *pair {
	return d.rules.loadOrCreate(name, func() *pair {
		l := labelValue(name, MaxDescriptorLabelLen)
		return &pair{hits: m.ruleHits.WithLabelValues(d.label, l), over: m.ruleOver.WithLabelValues(d.label, l)}
	})
}

// descriptor returns d's counters for the descriptor label held in key,
// folding into OtherLabel past MaxDetailedDescriptors.
func (m *Metrics) descriptor(d *domainStats, key []byte) *pair {
	if p, ok := d.detailed.loadBytes(key); ok {
		return p
	}
	if d.detailed.len() >= m.opts.MaxDetailedDescriptors {
		return m.detailedOther(d)
	}
	d.detailed.mu.Lock()
	defer d.detailed.mu.Unlock()
	if p, ok := d.detailed.loadBytes(key); ok {
		return p
	}
	if d.detailed.len() >= m.opts.MaxDetailedDescriptors {
		return m.detailedOther(d)
	}
	k := string(key)
	l := labelValue(k, MaxDescriptorLabelLen)
	p := &pair{hits: m.descHits.WithLabelValues(d.label, l), over: m.descOver.WithLabelValues(d.label, l)}
	d.detailed.storeLocked(k, p)
	return p
}

// detailedOther returns d's fold-over descriptor counters.
func (m *Metrics) detailedOther(d *domainStats) *pair {
	if p := d.detailedOther.Load(); p != nil {
		return p
	}
	p := &pair{hits: m.descHits.WithLabelValues(d.label, OtherLabel), over: m.descOver.WithLabelValues(d.label, OtherLabel)}
	d.detailedOther.Store(p)
	if d.foldLogged.CompareAndSwap(false, true) {
		m.log.WithFields(logrus.Fields{"domain": d.label, "cap": m.opts.MaxDetailedDescriptors}).Warn(
			"metrics: the domain's detailed_metric / value_to_metric descriptors reached the cap of distinct values; further values are counted under descriptor=\"" +
				OtherLabel + "\" (logged once per domain; the cap is fixed: fewer distinct values, or no detailed_metric, keep every value's series)")
	}
	return p
}

package metrics

import (
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// The per-node counters, the reference's per-descriptor stats
// (ratelimit.service.rate_limit.<domain>.<path>.<name>): one series of
// each per config node that has rules, so bounded by the configuration.
const (
	nodeTotalHits = iota
	nodeOverLimit
	nodeNearLimit
	nodeWithinLimit
	nodeShadowMode
	numNodeCounters
)

// nodeCounterNames are the reference's stat names, which the families are
// named after: sluice_rate_limit_<name>_total.
var nodeCounterNames = [numNodeCounters]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

var nodeCounterHelp = [numNodeCounters]string{
	"Cost (hits_addend) asked of a config node's rules, admitted or not, by domain and node path.",
	"Cost a config node's rules denied (shadowed or not), by domain and node path.",
	"Admitted cost that landed above the near-limit ratio of a config node's binding rule, by domain and node path.",
	"Cost a config node's rules admitted, by domain and node path.",
	"Cost a config node denied but answered OK because of its shadow_mode, by domain and node path.",
}

// nodeStats is one config node's counters: sluice's, and with
// Options.IncumbentNames the reference's Prometheus counters the node adds
// to (nil otherwise).
type nodeStats struct {
	own, incumbent [numNodeCounters]prometheus.Counter
	// ownLabels and incLabels are the label values of own and incumbent,
	// kept so that ConfigApplied can delete the series of a node it no
	// longer has.
	ownLabels [4]string
	incLabels [3]string
}

// add adds v to counter k.
func (ns *nodeStats) add(k int, v float64) {
	ns.own[k].Add(v)
	if c := ns.incumbent[k]; c != nil {
		c.Add(v)
	}
}

// nodeCounters returns d's counters for node n, creating them on first
// use. They are kept by n's stats path: nodes of one path (a value with a
// dot can make two paths alike, as it does in the reference's stat names)
// share them.
func (m *Metrics) nodeCounters(d *domainStats, n *descriptor.Node) *nodeStats {
	return d.nodes.loadOrCreate(n.Path(), func() *nodeStats {
		own, inc := nodeLabels(d, n)
		ns := &nodeStats{ownLabels: own, incLabels: inc}
		for k := range ns.own {
			ns.own[k] = m.node[k].WithLabelValues(own[:]...)
		}
		if m.incumbent[0] != nil {
			for k := range ns.incumbent {
				ns.incumbent[k] = m.incumbent[k].WithLabelValues(inc[:]...)
			}
		}
		return ns
	})
}

// nodeLabels returns the label values of the series of d's node n:
// sluice's (domain, descriptor, key1, key2), where key1 and key2 are n's
// first two levels whole (a value's dots included), and the reference's
// (domain, key1, key2), cut from the stats path at its dots as the
// reference's mapping cuts them.
func nodeLabels(d *domainStats, n *descriptor.Node) (own [4]string, inc [3]string) {
	path := n.Path()
	key1, key2 := firstTwoLevels(n)
	k1, k2 := incumbentKeys(path)
	return [4]string{d.label, labelValue(path, MaxDescriptorLabelLen),
			labelValue(key1, MaxDescriptorLabelLen), labelValue(key2, MaxDescriptorLabelLen)},
		[3]string{d.label, k1, k2}
}

// firstTwoLevels returns the stats-path parts ("key" or "key_value") of
// n's top two levels: its top-level ancestor's and the one below ("" when
// n is at the top).
func firstTwoLevels(n *descriptor.Node) (first, second string) {
	var below *descriptor.Node
	for n.Parent != nil {
		n, below = n.Parent, n
	}
	if below != nil {
		second = levelName(below)
	}
	return levelName(n), second
}

// levelName is n's own part of the stats path.
func levelName(n *descriptor.Node) string {
	if n.Value == "" {
		return n.Key
	}
	return n.Key + "_" + n.Value
}

// ConfigApplied sets the configured-limit gauges (sluice_rule_limit and
// the families beside it) to c's rules, and drops the series of what c no
// longer holds, so that a
// process whose configuration changes for months does not keep a series
// per domain, node or rule it ever served: every series of a domain that
// was configured and is not in c (sluice_decisions_total and the other
// families labelled by domain, the reference's names included), the
// per-node series of the nodes c no longer holds (a descriptor renamed or
// deleted), and the per-rule series of the rule names it no longer holds.
// A series that something still in c shares is kept: the reference's
// names group nodes by their first two path parts, and long paths, rule
// names and domain names are cut to the same label (a removed domain
// whose label a remaining domain, or OtherLabel, still uses keeps all its
// series). Domains that were
// never configured (outcome unknown_domain) keep their series; they are
// capped by Options.MaxUnknownDomains. A request decided with the
// previous configuration while this runs may create its domain's or
// node's series again; the next change drops it.
func (m *Metrics) ConfigApplied(c *descriptor.Config) {
	if m == nil || c == nil {
		return
	}
	m.limits.applyLimits(c)
	removed, kept := m.dropDomains(c)
	for _, d := range removed {
		if !kept[d.label] {
			m.deleteDomainSeries(d.label)
		}
	}
	for name, d := range m.domains.snapshot() {
		dom := c.Domain(name)
		if dom == nil {
			continue // not configured: it has only outcome series
		}
		paths, rules := map[string]bool{}, map[string]bool{}
		dom.Walk(func(n *descriptor.Node) {
			paths[n.Path()] = true
			for _, r := range n.Rules {
				rules[r.Name] = true
			}
		})
		m.dropRules(d, rules)
		removed := d.nodes.keepOnly(func(path string) bool { return paths[path] })
		if len(removed) == 0 {
			continue
		}
		keptOwn, keptInc := map[[4]string]bool{}, map[[3]string]bool{}
		for _, ns := range d.nodes.snapshot() {
			keptOwn[ns.ownLabels], keptInc[ns.incLabels] = true, true
		}
		for _, ns := range removed {
			own, inc := ns.ownLabels, ns.incLabels
			for k := range m.node {
				if !keptOwn[own] {
					m.node[k].DeleteLabelValues(own[:]...)
				}
				if m.incumbent[k] != nil && !keptInc[inc] {
					m.incumbent[k].DeleteLabelValues(inc[:]...)
				}
			}
		}
	}
}

// dropDomains removes from m.domains the domains c does not hold that were
// configured: in the configuration applied before c, or used for a
// decision of a configured domain (a request decided with an earlier
// configuration included). Domains c holds stop counting as unknown. It
// returns the removed domains' counters and the domain labels still in
// use (OtherLabel always).
func (m *Metrics) dropDomains(c *descriptor.Config) (removed map[string]*domainStats, kept map[string]bool) {
	m.domains.mu.Lock()
	defer m.domains.mu.Unlock()
	prev := m.applied
	m.applied = map[string]bool{}
	for _, name := range c.Domains() {
		m.applied[name] = true
	}
	removed = m.domains.keepOnlyLocked(func(name string, d *domainStats) bool {
		switch {
		case m.applied[name]:
			if d.unknown {
				d.unknown = false
				m.unknowns--
			}
			return true
		case prev[name] || !d.unknown || decidedAsConfigured(d):
			if d.unknown {
				m.unknowns-- // its label is free for another unknown domain
			}
			return false
		}
		return true
	})
	kept = map[string]bool{OtherLabel: true}
	for _, d := range m.domains.snapshot() {
		kept[d.label] = true
	}
	return removed, kept
}

// decidedAsConfigured reports whether d counted an outcome only a
// configured domain has: a request decided with an earlier configuration
// reused an unknown domain's counters.
func decidedAsConfigured(d *domainStats) bool {
	for o := range d.outcomes {
		if outcome(o) != outUnknownDomain && outcome(o) != outError && d.outcomes[o].Load() != nil {
			return true
		}
	}
	return false
}

// deleteDomainSeries deletes every series whose domain label is l.
func (m *Metrics) deleteDomainSeries(l string) {
	match := prometheus.Labels{"domain": l}
	for _, v := range []*prometheus.CounterVec{m.decisions, m.nearLimit, m.ruleHits, m.ruleOver, m.descHits, m.descOver} {
		v.DeletePartialMatch(match)
	}
	for k := range m.node {
		m.node[k].DeletePartialMatch(match)
		if m.incumbent[k] != nil {
			m.incumbent[k].DeletePartialMatch(match)
		}
	}
}

// incumbentKeys returns the key1 and key2 labels the reference's default
// statsd mapping (PROMETHEUS_MAPPER_YAML, which Envoy Gateway mounts
// unchanged) gives a node of stats path path: the first two dot-separated
// parts, each whole (up to MaxDescriptorLabelLen), of the path as the
// reference names its stats (sanitizeStatName). A node of one level has
// key2 "", which Prometheus stores as no key2 label, as the mapping's
// two-part rule makes it.
func incumbentKeys(path string) (key1, key2 string) {
	key1, key2 = firstTwoParts(sanitizeStatName(path))
	return labelValue(key1, MaxDescriptorLabelLen), labelValue(key2, MaxDescriptorLabelLen)
}

// statNameReplacer and ipv4InStatName are what the reference's stat names
// lose: ':' and '|' (statsd's separators) become '_', and so do the dots
// of anything shaped like an IPv4 address.
var (
	statNameReplacer = strings.NewReplacer(":", "_", "|", "_")
	ipv4InStatName   = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)
)

// sanitizeStatName returns s as the reference writes it into a stat name,
// before its Prometheus mapping splits the name at dots: so a value
// 192.168.0.0/16 (Envoy Gateway's CIDR rules) stays one label,
// masked_remote_address_192_168_0_0/16, instead of being cut at its first
// dot.
func sanitizeStatName(s string) string {
	s = statNameReplacer.Replace(s)
	return ipv4InStatName.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// firstTwoParts returns the first two dot-separated parts of s ("" for a
// part s does not have).
func firstTwoParts(s string) (first, second string) {
	first, rest, _ := strings.Cut(s, ".")
	second, _, _ = strings.Cut(rest, ".")
	return first, second
}

// observeNode counts a backend decision of ev's node as the reference
// counts its per-descriptor stats, in units of cost: total_hits always;
// within_limit when admitted, with near_limit for the part of the cost
// above ⌊capacity × NearLimitRatio⌋ of the binding rule; over_limit when
// denied (the whole cost: a denial consumes nothing), and shadow_mode too
// when the node's shadow_mode answered OK.
func (m *Metrics) observeNode(d *domainStats, ev *service.DescriptorEvent, o outcome) {
	ns := m.nodeCounters(d, ev.Node)
	n := ev.Cost.N
	ns.add(nodeTotalHits, float64(n))
	if o != outOK {
		ns.add(nodeOverLimit, float64(n))
		if o == outShadowOverLimit {
			ns.add(nodeShadowMode, float64(n))
		}
		return
	}
	ns.add(nodeWithinLimit, float64(n))
	if near := m.nearCost(ev); near > 0 {
		ns.add(nodeNearLimit, float64(near))
	}
}

// nearCost is the part of an admitted cost that landed above the binding
// rule's near-limit threshold (the reference's near_limit accounting).
func (m *Metrics) nearCost(ev *service.DescriptorEvent) uint64 {
	return min(ev.Cost.N, m.aboveNear(ev))
}

// dropRules drops d's per-rule series whose rule name names is without.
// Names cut to the same label as a name still held keep their series.
func (m *Metrics) dropRules(d *domainStats, names map[string]bool) {
	removed := d.rules.keepOnly(func(name string) bool { return names[name] })
	kept := map[string]bool{}
	for name := range d.rules.snapshot() {
		kept[labelValue(name, MaxDescriptorLabelLen)] = true
	}
	for name := range removed {
		if l := labelValue(name, MaxDescriptorLabelLen); !kept[l] {
			m.ruleHits.DeleteLabelValues(d.label, l)
			m.ruleOver.DeleteLabelValues(d.label, l)
		}
	}
}

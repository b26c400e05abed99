package xds

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// ExtensionKey is the key of a descriptor's metadata that carries sluice's
// extensions over xDS (docs/decisions/0036-xds-extensions.md). It is taken
// out of the metadata returned to Envoy.
const ExtensionKey = "sluice"

// CompileOptions control Compile.
type CompileOptions struct {
	// MergeDomains lets several resources define one domain: their
	// descriptors are joined, in resource order (MERGE_DOMAIN_CONFIG).
	// When false, a domain defined twice is an error.
	MergeDomains bool
}

// Compile turns the RateLimitConfig resources of one xDS response into a
// Config. Each resource becomes a descriptor.DomainSpec and goes through
// descriptor.Compile, the path YAML files take too, so a field means the
// same and is checked the same whichever way it came. Errors name the
// resource and the field path, e.g.
// "RateLimitConfig 'api': descriptors[0].rate_limit.unit: invalid rate
// limit unit ...". On error Compile returns nil and a descriptor.ErrorList
// of every mistake.
func Compile(confs []*rlsconfv3.RateLimitConfig, opts CompileOptions) (*descriptor.Config, error) {
	var errs descriptor.ErrorList
	var specs []*descriptor.DomainSpec
	byName := map[string]*descriptor.DomainSpec{}
	for i, conf := range confs {
		spec, err := domainSpec(conf, i)
		errs = append(errs, err...) // and compile it still, for its other errors
		first := byName[spec.Name]
		switch {
		case first == nil || spec.Name == "":
			byName[spec.Name] = &spec
			specs = append(specs, &spec)
		case opts.MergeDomains:
			first.Descriptors = append(first.Descriptors, spec.Descriptors...)
		default:
			errs = append(errs, &descriptor.Error{File: spec.At.Source, Path: "domain",
				Reason: fmt.Sprintf("duplicate domain '%s' (first in %s); set MERGE_DOMAIN_CONFIG=true to join them", spec.Name, first.At.Source)})
		}
	}
	var domains []*descriptor.Domain
	for _, spec := range specs {
		d, err := descriptor.Compile(*spec)
		if l, ok := err.(descriptor.ErrorList); ok {
			errs = append(errs, l...)
		} else if err != nil {
			errs = append(errs, &descriptor.Error{File: spec.At.Source, Reason: err.Error()})
		}
		if d != nil {
			domains = append(domains, d)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return descriptor.NewConfig(domains...)
}

// source names resource i for errors.
func source(conf *rlsconfv3.RateLimitConfig, i int) string {
	if conf.GetName() != "" {
		return "RateLimitConfig '" + conf.GetName() + "'"
	}
	return "RateLimitConfig #" + strconv.Itoa(i)
}

// domainSpec maps one resource onto the source-neutral model.
func domainSpec(conf *rlsconfv3.RateLimitConfig, i int) (descriptor.DomainSpec, descriptor.ErrorList) {
	src := source(conf, i)
	r := &reader{src: src}
	top := descriptor.Pos{Source: src}
	r.known(conf, top)
	spec := descriptor.DomainSpec{
		Name:   conf.GetDomain(),
		At:     top,
		NameAt: top.Below("domain"),
	}
	spec.Descriptors = r.descriptors(conf.GetDescriptors(), top, 1)
	return spec, r.errs
}

// reader maps descriptors and collects the errors of sluice's extension
// metadata (the proto's own fields are all checked by descriptor.Compile).
// It names values by descriptor.Pos made with Below, whose paths are
// joined only for an error: a path string per descriptor would take
// memory in proportion to the sum of every descriptor's depth.
type reader struct {
	src  string
	errs descriptor.ErrorList
}

func (r *reader) pos(path string) descriptor.Pos { return descriptor.Pos{Source: r.src, Path: path} }

func (r *reader) errorf(path, format string, args ...any) {
	r.errs = append(r.errs, &descriptor.Error{File: r.src, Path: path, Reason: fmt.Sprintf(format, args...)})
}

// descriptors maps the children of up, which are at depth (1: the
// resource's own). Descriptors deeper than descriptor.MaxDepth are not
// read: the first of each branch is reported, and the resource refused.
func (r *reader) descriptors(list []*rlsconfv3.RateLimitDescriptor, up descriptor.Pos, depth int) []descriptor.DescriptorSpec {
	if len(list) > 0 && depth > descriptor.MaxDepth {
		r.errorf(up.Below("descriptors").FullPath(), "descriptors nested %d levels deep or more, beyond the %d a configuration may have", depth, descriptor.MaxDepth)
		return nil
	}
	out := make([]descriptor.DescriptorSpec, 0, len(list))
	for i, d := range list {
		at := up.Below("descriptors[" + strconv.Itoa(i) + "]")
		r.known(d, at)
		s := descriptor.DescriptorSpec{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			ShadowMode:     d.GetShadowMode(),
			QuotaMode:      d.GetQuotaMode(),
			DetailedMetric: d.GetDetailedMetric(),
			At:             at,
			KeyAt:          at.Below("key"),
		}
		if m := d.GetMetadata(); m != nil {
			s.Metadata = m.AsMap()
		}
		if rl := d.GetRateLimit(); rl != nil {
			s.RateLimits = []descriptor.RuleSpec{r.policy(rl, at.Below("rate_limit"))}
		}
		if ext, ok := s.Metadata[ExtensionKey]; ok {
			delete(s.Metadata, ExtensionKey)
			if len(s.Metadata) == 0 {
				s.Metadata = nil
			}
			p := at.FullPath()
			r.extension(&s, ext, p+".metadata."+ExtensionKey, d.GetRateLimit() != nil, p+".rate_limit")
		}
		s.Descriptors = r.descriptors(d.GetDescriptors(), at, depth+1)
		out = append(out, s)
	}
	return out
}

// policy maps the proto's RateLimitPolicy. UNKNOWN is "no unit", which
// Compile refuses unless unlimited, as a YAML rule without unit.
func (r *reader) policy(rl *rlsconfv3.RateLimitPolicy, at descriptor.Pos) descriptor.RuleSpec {
	r.known(rl, at)
	s := descriptor.RuleSpec{
		Name:            rl.GetName(),
		RequestsPerUnit: rl.GetRequestsPerUnit(),
		Unlimited:       rl.GetUnlimited(),
		At:              at,
		UnitAt:          at.Below("unit"),
	}
	if u := rl.GetUnit(); u != rlsconfv3.RateLimitUnit_UNKNOWN {
		s.Unit = strings.ToLower(u.String())
	}
	for j, x := range rl.GetReplaces() {
		xAt := at.Below("replaces[" + strconv.Itoa(j) + "]")
		r.known(x, xAt)
		s.Replaces = append(s.Replaces, descriptor.ReplaceSpec{Name: x.GetName(), At: xAt.Below("name")})
	}
	return s
}

// known records an error when m carries fields this build's proto does
// not define: a management server built with a newer RateLimitConfig
// proto sent them, and ignoring them (as the proto library would) could
// change what a limit means, or drop it, without a word. The response is
// NACKed instead, and the configuration in use stays
// (docs/decisions/0080-envoy-gateway-drift.md).
func (r *reader) known(m proto.Message, at descriptor.Pos) {
	raw := m.ProtoReflect().GetUnknown()
	if len(raw) == 0 {
		return
	}
	var nums []string
	for len(raw) > 0 {
		num, _, n := protowire.ConsumeField(raw)
		if n < 0 {
			nums = append(nums, "(unreadable)")
			break
		}
		nums = append(nums, strconv.Itoa(int(num)))
		raw = raw[n:]
	}
	r.errorf(at.FullPath(), "fields %s unknown to this build of sluice (%s): the management server has a newer "+
		"RateLimitConfig proto; sluice refuses the configuration rather than ignore them", strings.Join(nums, ", "),
		m.ProtoReflect().Descriptor().FullName())
}

// extensionKeys and ruleKeys are the keys the extension map and its rules
// accept.
var (
	extensionKeys = []string{"rate_limits", "value_to_metric", "share_threshold", "charge_over_limit"}
	ruleKeys      = []string{"name", "unit", "requests_per_unit", "unlimited", "replaces",
		"algorithm", "burst", "unit_multiplier", "time_zone"}
)

// extension reads the ExtensionKey map of a descriptor's metadata into s.
func (r *reader) extension(s *descriptor.DescriptorSpec, v any, path string, hasRateLimit bool, rateLimitPath string) {
	m, ok := r.object(v, path, extensionKeys)
	if !ok {
		return
	}
	if b, ok := r.boolean(m, "value_to_metric", path); ok {
		s.ValueToMetric = b
	}
	if b, ok := r.boolean(m, "share_threshold", path); ok {
		s.ShareThreshold = b
		s.ShareThresholdAt = r.pos(path + ".share_threshold")
	}
	if b, ok := r.boolean(m, "charge_over_limit", path); ok {
		s.ChargeOverLimit = &b
	}
	list, ok := m["rate_limits"]
	if !ok {
		return
	}
	p := path + ".rate_limits"
	if hasRateLimit {
		r.errorf(p, "rate_limit (%s) and %s.rate_limits cannot both be set: put every rule in rate_limits", rateLimitPath, ExtensionKey)
		return
	}
	items, isList := list.([]any)
	if !isList {
		r.errorf(p, "rate_limits must be a list, got %s", kind(list))
		return
	}
	for i, item := range items {
		ip := p + "[" + strconv.Itoa(i) + "]"
		rm, ok := r.object(item, ip, ruleKeys)
		if !ok {
			continue
		}
		s.RateLimits = append(s.RateLimits, r.rule(rm, ip))
	}
}

// rule reads one rule map of the extension.
func (r *reader) rule(m map[string]any, path string) descriptor.RuleSpec {
	s := descriptor.RuleSpec{At: r.pos(path), UnitAt: r.pos(path + ".unit"), AlgorithmAt: r.pos(path + ".algorithm"),
		BurstAt: r.pos(path + ".burst"), UnitMultiplierAt: r.pos(path + ".unit_multiplier"), TimeZoneAt: r.pos(path + ".time_zone")}
	s.Name, _ = r.str(m, "name", path)
	s.Unit, _ = r.str(m, "unit", path)
	s.Algorithm, _ = r.str(m, "algorithm", path)
	if n, ok := r.uint32(m, "requests_per_unit", path, 0); ok {
		s.RequestsPerUnit = n
	}
	s.Unlimited, _ = r.boolean(m, "unlimited", path)
	if n, ok := r.uint32(m, "burst", path, 0); ok {
		s.Burst = &n
	}
	if n, ok := r.uint32(m, "unit_multiplier", path, 0); ok {
		s.UnitMultiplier = &n
	}
	if z, ok := r.str(m, "time_zone", path); ok {
		s.TimeZone = &z
	}
	if v, ok := m["replaces"]; ok {
		rp := path + ".replaces"
		items, isList := v.([]any)
		if !isList {
			r.errorf(rp, "replaces must be a list, got %s", kind(v))
		}
		for j, item := range items {
			ip := rp + "[" + strconv.Itoa(j) + "]"
			if im, ok := r.object(item, ip, []string{"name"}); ok {
				name, _ := r.str(im, "name", ip)
				s.Replaces = append(s.Replaces, descriptor.ReplaceSpec{Name: name, At: r.pos(ip + ".name")})
			}
		}
	}
	return s
}

// object checks v is a map holding only the allowed keys.
func (r *reader) object(v any, path string, allowed []string) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		r.errorf(path, "must be a map, got %s", kind(v))
		return nil, false
	}
	for k := range m {
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			r.errorf(path+"."+k, "unknown key '%s' (want one of %s)", k, strings.Join(allowed, ", "))
		}
	}
	return m, true
}

func (r *reader) str(m map[string]any, key, path string) (string, bool) {
	v, ok := m[key]
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		r.errorf(path+"."+key, "%s must be a string, got %s", key, kind(v))
	}
	return s, ok
}

func (r *reader) boolean(m map[string]any, key, path string) (bool, bool) {
	v, ok := m[key]
	if !ok {
		return false, false
	}
	b, ok := v.(bool)
	if !ok {
		r.errorf(path+"."+key, "%s must be true or false, got %s", key, kind(v))
	}
	return b, ok
}

// uint32 reads a whole number from lo to MaxUint32 (a Struct holds numbers
// as float64, exact up to 2^53).
func (r *reader) uint32(m map[string]any, key, path string, lo float64) (uint32, bool) {
	v, ok := m[key]
	if !ok {
		return 0, false
	}
	f, isNum := v.(float64)
	if !isNum || f != math.Trunc(f) || f < lo || f > math.MaxUint32 {
		r.errorf(path+"."+key, "%s must be a whole number from %v to %d, got %s", key, lo, uint64(math.MaxUint32), kind(v))
		return 0, false
	}
	return uint32(f), true
}

// kind describes a metadata value for an error.
func kind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}

package service

import (
	"strconv"
	"strings"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// dynamicMetadata builds the response's dynamic_metadata as the reference
// does: the domain, every request descriptor ({entries: ["k=v", ...],
// limit?, hitsAddend?}), the request's hitsAddend when not 0, and
// "metadata": the config metadata of every descriptor that passed with a
// limit applied (checked or unlimited), merged with the first value winning.
// Beside those, sluice's own: "overLimit", the descriptors whose status is
// OVER_LIMIT and why, and "shadowOverLimit", those a node's shadow_mode
// reported OK (see deniedStruct); each is absent when empty. respond calls
// it after viewOf set every item's over and shadowed.
func (s *Service) dynamicMetadata(req *rlsv3.RateLimitRequest, w *work) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 4)
	fields["domain"] = structpb.NewStringValue(validUTF8(req.Domain))
	descs := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if req.HitsAddend != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(req.HitsAddend))
	}
	var merged *structpb.Struct
	for i := range w.items {
		it := &w.items[i]
		if it.over || it.node == nil || len(it.node.Metadata) == 0 || (it.kind != kindCheck && it.kind != kindUnlimited) {
			continue
		}
		md, err := structpb.NewStruct(it.node.Metadata)
		if err != nil {
			s.log.WithFields(logrus.Fields{"file": it.node.File, "line": it.node.Line}).WithError(err).
				Warn("service: descriptor metadata cannot be returned as dynamic metadata")
			continue
		}
		if merged == nil {
			merged = md
			continue
		}
		mergeStruct(merged, md)
	}
	if merged != nil && len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	var over, shadow []*structpb.Value
	for i := range w.items {
		switch it := &w.items[i]; {
		case it.over:
			over = append(over, structpb.NewStructValue(deniedStruct(i, descs[i], it)))
		case it.shadowed:
			shadow = append(shadow, structpb.NewStructValue(deniedStruct(i, descs[i], it)))
		}
	}
	if over != nil {
		fields["overLimit"] = structpb.NewListValue(&structpb.ListValue{Values: over})
	}
	if shadow != nil {
		fields["shadowOverLimit"] = structpb.NewListValue(&structpb.ListValue{Values: shadow})
	}
	return &structpb.Struct{Fields: fields}
}

// The reasons of deniedStruct.
const (
	deniedByRule        = "over_limit"
	deniedByFailureMode = "failure_mode_deny"
	deniedAsInvalid     = "invalid"
)

// deniedStruct says why request descriptor i (item it, described in
// dynamic metadata as desc) is, or but for its node's shadow_mode would
// be, OVER_LIMIT: {index: i, entries: desc's entries ["k=v", ...], descriptor: the config node's path (as the metrics' descriptor
// label; absent for a limit override or an invalid descriptor), override:
// true for a request limit override, rules: the name (the state id when
// unnamed) of every rule that denied, reason: over_limit (the rules
// denied), failure_mode_deny (the backend could not decide and the
// domain's failure_mode is deny; rules lists every rule of the
// descriptor) or invalid (malformed, never decided; no rules)}.
func deniedStruct(i int, desc *structpb.Value, it *item) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 6)
	fields["index"] = structpb.NewNumberValue(float64(i))
	fields["entries"] = desc.GetStructValue().GetFields()["entries"]
	if it.node != nil {
		fields["descriptor"] = structpb.NewStringValue(validUTF8(it.node.Path()))
	}
	if it.override {
		fields["override"] = structpb.NewBoolValue(true)
	}
	reason := deniedByRule
	var rules []*structpb.Value
	switch {
	case it.kind == kindInvalid:
		reason = deniedAsInvalid
	case it.failed == failedShut:
		reason = deniedByFailureMode
		for j := range it.rules {
			rules = append(rules, structpb.NewStringValue(ruleID(&it.rules[j])))
		}
	default:
		for j := range it.rules {
			if j < len(it.dec.Outcomes) && !it.dec.Outcomes[j].Allowed {
				rules = append(rules, structpb.NewStringValue(ruleID(&it.rules[j])))
			}
		}
	}
	if it.kind != kindInvalid {
		fields["rules"] = structpb.NewListValue(&structpb.ListValue{Values: rules})
	}
	fields["reason"] = structpb.NewStringValue(reason)
	return &structpb.Struct{Fields: fields}
}

// ruleID names r in dynamic metadata: its name, or its state id when it
// has none (as the metrics' rule label).
func ruleID(r *limit.Rule) string {
	if r.Name != "" {
		return validUTF8(r.Name)
	}
	return r.ID()
}

// descriptorStruct describes one request descriptor for dynamic metadata.
func descriptorStruct(d *ratelimitv3.RateLimitDescriptor) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 3)
	// d, or one of its entries, may be nil: an invalid descriptor is
	// answered (OVER_LIMIT) and echoed like the others.
	entries := make([]*structpb.Value, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		entries[i] = structpb.NewStringValue(validUTF8(e.GetKey() + "=" + e.GetValue()))
	}
	fields["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entries})
	if o := d.GetLimit(); o != nil {
		fields["limit"] = structpb.NewStringValue(overrideString(o))
	}
	if d.GetHitsAddend() != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(d.HitsAddend.Value))
	}
	return &structpb.Struct{Fields: fields}
}

// overrideString writes a limit override in protobuf text format, e.g.
// "requests_per_unit:10 unit:MINUTE unit_multiplier:{value:5}". Unlike the
// reference's proto String() it never varies between builds.
func overrideString(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) string {
	var b strings.Builder
	b.WriteString("requests_per_unit:")
	b.WriteString(strconv.FormatUint(uint64(o.RequestsPerUnit), 10))
	b.WriteString(" unit:")
	b.WriteString(o.Unit.String())
	if o.UnitMultiplier != nil {
		b.WriteString(" unit_multiplier:{value:")
		b.WriteString(strconv.FormatUint(uint64(o.UnitMultiplier.Value), 10))
		b.WriteString("}")
	}
	return b.String()
}

// validUTF8 returns s with every invalid UTF-8 sequence replaced by U+FFFD:
// request strings may hold any byte (the server decodes them as sent), but
// a protobuf string in the response must be UTF-8 or the whole response
// fails to encode.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// mergeStruct adds src's fields to dst: a key already in dst keeps dst's
// value, except that two structs merge recursively.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.Fields {
		old, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if a, b := old.GetStructValue(), v.GetStructValue(); a != nil && b != nil {
			mergeStruct(a, b)
		}
	}
}

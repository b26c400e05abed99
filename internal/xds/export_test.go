package xds

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// WithUnknown appends a varint field of each number to m's unknown
// fields, as a resource from a newer RateLimitConfig proto carries them.
func WithUnknown(m proto.Message, nums ...protowire.Number) {
	raw := m.ProtoReflect().GetUnknown()
	for _, n := range nums {
		raw = protowire.AppendTag(raw, n, protowire.VarintType)
		raw = protowire.AppendVarint(raw, 1)
	}
	m.ProtoReflect().SetUnknown(raw)
}

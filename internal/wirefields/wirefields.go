// Package wirefields walks the fields of an encoded protobuf message
// without a generated type: the server's request decoder and the benchmark's
// CPU-profile reader both read messages this way. It owns the walk and its
// checks on malformed input, and knows no message.
package wirefields

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Each calls fn for every field of the encoded message b, in order, with its
// number and wire type: n holds a varint's or a fixed-size field's value,
// val a length-delimited field's bytes (a slice of b), and neither is set for
// the others (groups), which it skips. It stops at fn's first error and
// returns it, and fails on malformed input: a bad tag, a field number out
// of range, or a truncated value.
func Each(b []byte, fn func(num protowire.Number, typ protowire.Type, n uint64, val []byte) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		if num > protowire.MaxValidNumber { // ConsumeTag checks only the lower bound
			return fmt.Errorf("field number %d out of range", num)
		}
		b = b[l:]
		var n uint64
		var val []byte
		switch typ {
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			val, l = protowire.ConsumeBytes(b)
		case protowire.Fixed64Type:
			n, l = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var y uint32
			y, l = protowire.ConsumeFixed32(b)
			n = uint64(y)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if err := fn(num, typ, n, val); err != nil {
			return err
		}
	}
	return nil
}

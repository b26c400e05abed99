package wirefields

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// field is what Each reported for one field.
type field struct {
	num protowire.Number
	typ protowire.Type
	n   uint64
	val string
}

func TestEach(t *testing.T) {
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.VarintType)
	msg = protowire.AppendVarint(msg, 300)
	msg = protowire.AppendTag(msg, 2, protowire.BytesType)
	msg = protowire.AppendBytes(msg, []byte("abc"))
	msg = protowire.AppendTag(msg, 3, protowire.Fixed64Type)
	msg = protowire.AppendFixed64(msg, math.MaxUint64-1)
	msg = protowire.AppendTag(msg, 4, protowire.Fixed32Type)
	msg = protowire.AppendFixed32(msg, 7)
	msg = protowire.AppendTag(msg, 5, protowire.StartGroupType)
	msg = protowire.AppendTag(msg, 5, protowire.EndGroupType)

	outOfRange := protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3)
	outOfRange = protowire.AppendVarint(outOfRange, 1)

	tests := []struct {
		name    string
		b       []byte
		want    []field
		wantErr string
	}{
		{name: "empty", b: nil},
		{name: "every wire type", b: msg, want: []field{
			{1, protowire.VarintType, 300, ""},
			{2, protowire.BytesType, 0, "abc"},
			{3, protowire.Fixed64Type, math.MaxUint64 - 1, ""},
			{4, protowire.Fixed32Type, 7, ""},
			{5, protowire.StartGroupType, 0, ""},
		}},
		{name: "truncated value", b: msg[:len(msg)-14], want: []field{
			{1, protowire.VarintType, 300, ""},
			{2, protowire.BytesType, 0, "abc"},
		}, wantErr: "unexpected EOF"},
		{name: "bad tag", b: []byte{0x80}, wantErr: "unexpected EOF"},
		{name: "field number out of range", b: outOfRange, wantErr: "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []field
			err := Each(tt.b, func(num protowire.Number, typ protowire.Type, n uint64, val []byte) error {
				got = append(got, field{num, typ, n, string(val)})
				return nil
			})
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("fields %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEachStopsAtTheCallbacksError(t *testing.T) {
	var msg []byte
	for i := protowire.Number(1); i <= 3; i++ {
		msg = protowire.AppendTag(msg, i, protowire.VarintType)
		msg = protowire.AppendVarint(msg, uint64(i))
	}
	stop := errors.New("stop")
	calls := 0
	err := Each(msg, func(num protowire.Number, _ protowire.Type, _ uint64, _ []byte) error {
		calls++
		if num == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Errorf("error %v after %d calls, want stop after 2", err, calls)
	}
}

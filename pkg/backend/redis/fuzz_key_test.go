package redis

import (
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/identity"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// fuzzZones are time zones a config may name (the parser accepts only what
// time.LoadLocation accepts); "" is none.
var fuzzZones = []string{"", "UTC", "Asia/Shanghai", "America/Argentina/ComodRivadavia", "Etc/GMT+12"}

// fuzzDescriptor turns fuzz bytes into a descriptor, as testenv.FuzzDescriptor
// reads them.
func fuzzDescriptor(data []byte) (domain string, entries []identity.Entry) {
	domain, kvs := testenv.FuzzDescriptor(data)
	for _, kv := range kvs {
		entries = append(entries, identity.Entry{Key: kv[0], Value: kv[1]})
	}
	return domain, entries
}

// fuzzRule builds a valid rule from three fuzz numbers.
func fuzzRule(t *testing.T, alg, unit uint8, mult uint32, zone uint8) limit.Rule {
	r := limit.Rule{Algorithm: limit.Algorithm(alg % 6), Unit: limit.Unit(1 + unit%7), Multiplier: mult, Limit: 1}
	if name := fuzzZones[int(zone)%len(fuzzZones)]; name != "" && r.Algorithm == limit.FixedWindow {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Skip(err) // no tzdata here
		}
		r.Location = loc
	}
	return r
}

// hashTag returns the part of key Redis Cluster hashes: the bytes between
// the first '{' and the first '}' after it, when that is not empty;
// otherwise the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// keyOverhead is the most a rule adds to a key besides its time zone name:
// "{", "}:", a two-letter algorithm, ".", a uint32 multiplier (10 digits),
// two letters of unit, and the "." before a zone.
const keyOverhead = 3 + 2 + 1 + 10 + 2 + 1

// FuzzKey checks the full Redis key of any descriptor and rule: its hash
// tag is exactly the descriptor's identity (so all rules of a descriptor
// share one slot), it is bounded whatever the request held, two different
// descriptors never share a key, and two sliding logs of different rule IDs
// never share a key (the counters of one descriptor share its counter key,
// in records named by rule ID).
func FuzzKey(f *testing.F) {
	f.Add("rl:", []byte("\x03api\x04user\x05alice"), uint8(0), uint8(0), uint32(1), uint8(0), []byte("\x03api\x04user\x05alicf"), uint8(0), uint8(0), uint32(1), uint8(0))
	f.Add("", []byte("\x01d\x01k\x05{a}|b"), uint8(3), uint8(2), uint32(5), uint8(0), []byte("\x01d\x01k\x07%7Ba%7D"), uint8(3), uint8(2), uint32(5), uint8(0))
	f.Add("p", []byte("\xff"+strings.Repeat("}", 255)), uint8(0), uint8(3), uint32(1<<32-1), uint8(3), []byte("\x00"), uint8(5), uint8(6), uint32(0), uint8(2))
	f.Fuzz(func(t *testing.T, prefix string, a []byte, alg1, unit1 uint8, mult1 uint32, zone1 uint8,
		b []byte, alg2, unit2 uint8, mult2 uint32, zone2 uint8) {
		if strings.ContainsAny(prefix, "{}") {
			return // Options.normalize refuses such a prefix
		}
		d1, e1 := fuzzDescriptor(a)
		d2, e2 := fuzzDescriptor(b)
		r1 := fuzzRule(t, alg1, unit1, mult1, zone1)
		r2 := fuzzRule(t, alg2, unit2, mult2, zone2)
		id1, id2 := identity.Encode(d1, e1), identity.Encode(d2, e2)
		// A refused identity (the empty descriptor) gets no key: "".
		k1, _ := stateKey(prefix, id1, r1)
		k2, _ := stateKey(prefix, id2, r2)
		for _, c := range []struct {
			id, key string
			r       limit.Rule
		}{{id1, k1, r1}, {id2, k2, r2}} {
			if err := checkIdentity(c.id); err != nil {
				if c.id != "" {
					t.Fatalf("identity %q refused: %v", c.id, err)
				}
				continue // the empty descriptor: refused, never sent (the service requires a domain)
			}
			if _, err := prepareRule(c.r); err != nil {
				t.Fatalf("rule %v refused: %v", c.r, err)
			}
			if tag := hashTag(c.key); tag != c.id {
				t.Fatalf("key %q hashes on %q, want the identity %q", c.key, tag, c.id)
			}
			zone := 0
			if c.r.Location != nil {
				zone = len(c.r.Location.String())
			}
			if bound := len(prefix) + identity.MaxLen + keyOverhead + zone; len(c.key) > bound {
				t.Fatalf("key of %d bytes, bound %d: %q", len(c.key), bound, c.key)
			}
		}
		sameDescriptor := d1 == d2 && len(e1) == len(e2)
		for i := 0; sameDescriptor && i < len(e1); i++ {
			sameDescriptor = e1[i] == e2[i]
		}
		if k1 != "" && k1 == k2 && (!sameDescriptor || (ownsKey(r1) || ownsKey(r2)) && r1.ID() != r2.ID()) {
			t.Fatalf("(%q, %q, %s) and (%q, %q, %s) share the key %q", d1, e1, r1.ID(), d2, e2, r2.ID(), k1)
		}
	})
}

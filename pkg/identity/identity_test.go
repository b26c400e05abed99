package identity

import (
	"errors"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strconv"
	"strings"
	"testing"
)

func TestEncode(t *testing.T) {
	long := strings.Repeat("x", MaxLen)
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		want    string
	}{
		{"domain only", "api", nil, "api"},
		{"empty", "", nil, ""},
		{"one entry", "api", []Entry{{"user", "alice"}}, "api|user=alice"},
		{"two entries", "api", []Entry{{"user", "alice"}, {"path", "/ocr"}}, "api|user=alice|path=/ocr"},
		{"key only", "api", []Entry{{"remote_address", ""}}, "api|remote_address="},
		{"empty key and value", "api", []Entry{{"", ""}}, "api|="},
		{"separators escaped", "a|b", []Entry{{"k=", "v|w=x"}}, "a%7Cb|k%3D=v%7Cw%3Dx"},
		{"escape byte escaped", "100%", []Entry{{"k", "%41"}}, "100%25|k=%2541"},
		{"braces escaped", "{d}", []Entry{{"{k}", "}{"}}, "%7Bd%7D|%7Bk%7D=%7D%7B"},
		{"hash marker escaped", "#d", []Entry{{"k", "#"}}, "%23d|k=%23"},
		{"other bytes pass through", "d", []Entry{{"k", "a\nb\x00\xff:_ é"}}, "d|k=a\nb\x00\xff:_ é"},
		{"MaxLen exactly", long[:MaxLen-4], []Entry{{"k", "v"}}, long[:MaxLen-4] + "|k=v"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Encode(tt.domain, tt.entries)
			if got != tt.want {
				t.Errorf("Encode(%q, %q) = %q, want %q", tt.domain, tt.entries, got, tt.want)
			}
			if IsHashed(got) {
				t.Errorf("IsHashed(%q) = true", got)
			}
		})
	}
}

func TestEncodeHashesLongIdentities(t *testing.T) {
	tests := []struct {
		name    string
		domain  string
		entries []Entry
	}{
		{"one over MaxLen", strings.Repeat("x", MaxLen-3), []Entry{{"k", "v"}}},
		{"escaping pushes it over", strings.Repeat("{", MaxLen/3+1), nil},
		{"64 KiB value", "api", []Entry{{"k", strings.Repeat("v", 64<<10)}}},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Encode(tt.domain, tt.entries)
			if !IsHashed(got) || len(got) != 44 {
				t.Fatalf("Encode = %q (%d bytes), want '#' and 43 characters of digest", got, len(got))
			}
			if other, dup := seen[got]; dup {
				t.Fatalf("same digest as %q", other)
			}
			seen[got] = tt.name
			if again := Encode(tt.domain, tt.entries); again != got {
				t.Fatalf("Encode is not deterministic: %q then %q", got, again)
			}
		})
	}
}

func TestEncodeDistinguishesReferenceCollisions(t *testing.T) {
	// envoyproxy/ratelimit joins keys and values with '_' unescaped; these
	// pairs share its cache key but must not share an identity.
	pairs := [][2][]Entry{
		{{{"a", "b_c"}}, {{"a_b", "c"}}},
		{{{"k", "a|b=c"}}, {{"k", "a"}, {"b", "c"}}},
		{{{"k", "v"}}, {{"k", "v"}, {"", ""}}},
		{{{"k=v", ""}}, {{"k", "=v"}}},
		{{{"k", ""}}, {{"k=", ""}}},
	}
	for _, p := range pairs {
		a, b := Encode("d", p[0]), Encode("d", p[1])
		if a == b {
			t.Errorf("%q and %q share the identity %q", p[0], p[1], a)
		}
	}
	if Encode("d|k=v", nil) == Encode("d", []Entry{{"k", "v"}}) {
		t.Error("a domain containing the separators collides with a descriptor")
	}
}

// decodeFuzz turns fuzz bytes into a descriptor, as testenv.FuzzDescriptor reads
// them.
func decodeFuzz(data []byte) (domain string, entries []Entry) {
	domain, kvs := testenv.FuzzDescriptor(data)
	for _, kv := range kvs {
		entries = append(entries, Entry{kv[0], kv[1]})
	}
	return domain, entries
}

// decodeIdentity inverts an unhashed identity: it proves the encoding is
// injective, since every identity maps back to exactly one descriptor.
func decodeIdentity(id string) (domain string, entries []Entry, err error) {
	parts := strings.Split(id, "|")
	if domain, err = unescape(parts[0]); err != nil {
		return "", nil, err
	}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok || strings.Contains(v, "=") {
			return "", nil, errors.New("entry without exactly one '='")
		}
		e := Entry{}
		if e.Key, err = unescape(k); err != nil {
			return "", nil, err
		}
		if e.Value, err = unescape(v); err != nil {
			return "", nil, err
		}
		entries = append(entries, e)
	}
	return domain, entries, nil
}

func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) && c != '%' {
			return "", errors.New("unescaped " + strconv.QuoteRune(rune(c)))
		}
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("truncated escape")
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil || s[i+1:i+3] != strings.ToUpper(s[i+1:i+3]) {
			return "", errors.New("bad escape " + s[i:i+3])
		}
		if !needsEscape(byte(v)) {
			return "", errors.New("needless escape " + s[i:i+3])
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

func sameDescriptor(d1 string, e1 []Entry, d2 string, e2 []Entry) bool {
	if d1 != d2 || len(e1) != len(e2) {
		return false
	}
	for i := range e1 {
		if e1[i] != e2[i] {
			return false
		}
	}
	return true
}

// FuzzEncodeInjective checks that two different descriptors never share an
// identity, that identities never contain '{' or '}' and are at most
// MaxLen bytes, and that every unhashed identity decodes back to its
// descriptor.
func FuzzEncodeInjective(f *testing.F) {
	f.Add([]byte("\x03api\x04user\x05alice"), []byte("\x03api\x06user_a\x04lice"))
	f.Add([]byte("\x01d\x01k\x05a|b=c"), []byte("\x01d\x01k\x01a\x01b\x01c"))
	f.Add([]byte("\x03{d}\x02k=\x03%7B"), []byte("\x03{d}\x01k\x04=%7B"))
	f.Add([]byte("\x01#\x00\x00"), []byte("\x03%23"))
	f.Add([]byte(strings.Repeat("\xff"+strings.Repeat("{", 255), 2)), []byte(strings.Repeat("\xff"+strings.Repeat("}", 255), 2)))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		d1, e1 := decodeFuzz(a)
		d2, e2 := decodeFuzz(b)
		id1, id2 := Encode(d1, e1), Encode(d2, e2)
		for _, id := range []string{id1, id2} {
			if strings.ContainsAny(id, "{}") {
				t.Fatalf("identity %q contains a brace", id)
			}
			if len(id) > MaxLen {
				t.Fatalf("identity of %d bytes, MaxLen %d", len(id), MaxLen)
			}
		}
		if !IsHashed(id1) {
			d, e, err := decodeIdentity(id1)
			if err != nil || !sameDescriptor(d, e, d1, e1) {
				t.Fatalf("identity %q decodes to (%q, %q, %v), want (%q, %q)", id1, d, e, err, d1, e1)
			}
		}
		if id1 == id2 && !sameDescriptor(d1, e1, d2, e2) {
			t.Fatalf("(%q, %q) and (%q, %q) share the identity %q", d1, e1, d2, e2, id1)
		}
	})
}

// TestEncodeAllocatesOnce: a descriptor below MaxLen costs one allocation,
// the identity string itself.
func TestEncodeAllocatesOnce(t *testing.T) {
	entries := []Entry{{Key: "remote_address", Value: "203.0.113.42"}, {Key: "path", Value: "/api/v1/orders"}}
	if n := testing.AllocsPerRun(100, func() { _ = Encode("api", entries) }); n != 1 {
		t.Errorf("Encode: %v allocations, want 1", n)
	}
}

package loadgen

import (
	"fmt"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Template is one descriptor of a request, e.g. "user={id},path=/api":
// comma-separated key=value entries whose values (and keys) may hold the
// placeholders {n}, {id} and {ip}, filled from the request's key number:
//
//	{n}   the key number in decimal: 42
//	{id}  "id" and the number: id42
//	{ip}  an IPv4 address unique per key below 2^24: 10.0.0.42
//
// A value may contain '=' after the first one; it may not contain ','.
type Template struct {
	entries []entryTemplate
	text    string
}

type entryTemplate struct {
	key, value []part
}

// part is a literal or a placeholder.
type part struct {
	lit  string
	kind placeholder // 0 for a literal
}

type placeholder int

const (
	phNone placeholder = iota
	phN
	phID
	phIP
)

var placeholders = map[string]placeholder{"{n}": phN, "{id}": phID, "{ip}": phIP}

// ParseTemplate parses a descriptor template.
func ParseTemplate(s string) (Template, error) {
	t := Template{text: s}
	if strings.TrimSpace(s) == "" {
		return t, fmt.Errorf("descriptor template is empty")
	}
	for _, e := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return t, fmt.Errorf("descriptor template %q: entry %q is not key=value", s, e)
		}
		kp, err := parseParts(k)
		if err != nil {
			return t, fmt.Errorf("descriptor template %q: key %q: %w", s, k, err)
		}
		vp, err := parseParts(v)
		if err != nil {
			return t, fmt.Errorf("descriptor template %q: value %q: %w", s, v, err)
		}
		t.entries = append(t.entries, entryTemplate{key: kp, value: vp})
	}
	return t, nil
}

func parseParts(s string) ([]part, error) {
	var parts []part
	for s != "" {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			parts = append(parts, part{lit: s})
			break
		}
		if i > 0 {
			parts = append(parts, part{lit: s[:i]})
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("unclosed placeholder in %q", s)
		}
		kind, ok := placeholders[s[i:i+j+1]]
		if !ok {
			return nil, fmt.Errorf("unknown placeholder %s (want {n}, {id} or {ip})", s[i:i+j+1])
		}
		parts = append(parts, part{kind: kind})
		s = s[i+j+1:]
	}
	return parts, nil
}

// String returns the template as parsed.
func (t Template) String() string { return t.text }

// Expand returns the descriptor for key number n.
func (t Template) Expand(n uint64) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{Entries: make([]*ratelimitv3.RateLimitDescriptor_Entry, len(t.entries))}
	var buf []byte
	for i, e := range t.entries {
		var key, value string
		buf, key = expand(buf[:0], e.key, n)
		buf, value = expand(buf[:0], e.value, n)
		d.Entries[i] = &ratelimitv3.RateLimitDescriptor_Entry{Key: key, Value: value}
	}
	return d
}

func expand(buf []byte, parts []part, n uint64) ([]byte, string) {
	if len(parts) == 1 && parts[0].kind == phNone {
		return buf, parts[0].lit
	}
	for _, p := range parts {
		switch p.kind {
		case phNone:
			buf = append(buf, p.lit...)
		case phN:
			buf = strconv.AppendUint(buf, n, 10)
		case phID:
			buf = append(buf, "id"...)
			buf = strconv.AppendUint(buf, n, 10)
		case phIP:
			buf = appendIP(buf, n)
		}
	}
	return buf, string(buf)
}

// appendIP appends 10.a.b.c with a.b.c the low 24 bits of n.
func appendIP(buf []byte, n uint64) []byte {
	buf = append(buf, "10."...)
	buf = strconv.AppendUint(buf, n>>16&0xff, 10)
	buf = append(buf, '.')
	buf = strconv.AppendUint(buf, n>>8&0xff, 10)
	buf = append(buf, '.')
	return strconv.AppendUint(buf, n&0xff, 10)
}

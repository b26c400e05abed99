// Package identity encodes a request descriptor (domain and entries) into the
// string that names its rate-limit state in every backend.
//
// The encoding is injective: two different descriptors never share an
// identity, whatever bytes their keys and values hold (separators, braces,
// newlines, NUL, invalid UTF-8). It never contains '{' or '}', so the Redis
// backend can wrap it in a cluster hash tag. It is bounded: an encoding longer
// than MaxLen is replaced by a SHA-256 digest, marked so it can never equal
// an unhashed encoding.
//
// How a descriptor becomes a Redis key: the service encodes it here; the
// Redis backend hands the identity to pkg/scripts, whose AppendKeys wraps
// it as <prefix>{<identity>} (plus ":<rule id>" for a sliding log's own
// key); pkg/scripts/CONTRACT.md, "Keys", is the specification.
//
// The package knows nothing of rules, backends or configuration: it only
// turns a domain and its entries into a string.
package identity

import (
	"crypto/sha256"
	"encoding/base64"
)

// MaxLen is the longest identity Encode returns unhashed. Longer encodings
// are replaced by "#" followed by 43 characters of unpadded base64url
// SHA-256, so every identity is at most MaxLen bytes.
const MaxLen = 200

// Entry is one key/value pair of a descriptor. descriptor.Entry is the
// same type. The zero Entry (empty key and value) is a valid entry; it
// encodes as "|=".
type Entry struct {
	Key, Value string
}

// escaped bytes: the separators, the escape byte, the hash-tag braces and the
// hashed-form marker. Everything else passes through.
func needsEscape(c byte) bool {
	switch c {
	case '%', '=', '|', '{', '}', '#':
		return true
	}
	return false
}

const hexDigits = "0123456789ABCDEF"

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// Encode returns the identity of the descriptor (domain, entries):
// escaped domain, then "|key=value" per entry, each part percent-escaped so
// that no separator can appear inside a part. Identities longer than MaxLen
// are hashed. Encode is a pure function, safe for concurrent use; its
// result is at most MaxLen bytes.
func Encode(domain string, entries []Entry) string {
	n := len(domain)
	for _, e := range entries {
		n += 2 + len(e.Key) + len(e.Value)
	}
	// Build on the stack when the identity is short enough to be kept
	// (the common case): the returned string is then the only allocation.
	var stack [MaxLen + 1]byte
	b := stack[:0]
	if n+8 > len(stack) {
		b = make([]byte, 0, n+8)
	}
	b = appendEscaped(b, domain)
	for _, e := range entries {
		b = append(b, '|')
		b = appendEscaped(b, e.Key)
		b = append(b, '=')
		b = appendEscaped(b, e.Value)
	}
	if len(b) <= MaxLen {
		return string(b)
	}
	sum := sha256.Sum256(b)
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}

package descriptor

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestYAMLErrorLines is the regression test for YAML errors that carried
// no line: the YAML library omits it for errors on the first line, and
// gives none for a control character or invalid UTF-8 anywhere in the
// file, so `sluice validate` printed "file: bad YAML: control characters
// are not allowed" for a stray byte on line 200.
func TestYAMLErrorLines(t *testing.T) {
	tests := []struct {
		data string
		want string
	}{
		{"\t- x", "f.yaml:1: bad YAML: found character that cannot start any token"},
		{"a: \x01\n", "f.yaml:1: bad YAML: control characters are not allowed"},
		{"domain: d\ndescriptors:\n  - key: \x7f\n", "f.yaml:3: bad YAML: control characters are not allowed"},
		{"domain: d\n\ndescriptors: \xff\n", "f.yaml:3: bad YAML: invalid leading UTF-8 octet"},
		{"domain: d\n# \xc3\n", "f.yaml:2: bad YAML: invalid trailing UTF-8 octet"},
		{"domain: d\r\ndescriptors: \x00\r\n", "f.yaml:2: bad YAML: control characters are not allowed"},
	}
	for _, tt := range tests {
		_, err := Parse("f.yaml", []byte(tt.data))
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q) = %v, want %s", tt.data, err, tt.want)
		}
	}
}

// FuzzParseLines checks that every error Parse reports points into the
// input: a line between 1 and the number of lines, so that an operator
// can find it. The one error without a line is a file holding no YAML
// document at all.
func FuzzParseLines(f *testing.F) {
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n"))
	f.Add([]byte("domain: d\ndescriptors: [{key: a, rate_limits: [{unit: second, requests_per_unit: -1}]}]"))
	f.Add([]byte("a: *x\n"))
	f.Add([]byte("domain: d\n---\ndomain: d\n"))
	f.Add([]byte("# only a comment\n"))
	f.Add([]byte("\t- x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Parse("fuzz.yaml", data)
		if err == nil {
			return
		}
		var list ErrorList
		if !errors.As(err, &list) {
			t.Fatalf("error %T is not an ErrorList: %v", err, err)
		}
		// YAML also breaks lines at a lone CR, NEL, LS and PS: count
		// every break for the upper bound.
		lines := 1
		for _, br := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
			lines += bytes.Count(data, []byte(br))
		}
		if bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff}) {
			lines = len(data) // UTF-16 (the library decodes it): any two bytes may be a break
		}
		for _, e := range list {
			if e.Line == 0 && len(list) == 1 && e.Reason == "config file cannot have empty domain: it holds no YAML document" {
				continue
			}
			if e.Line < 1 || e.Line > lines {
				t.Fatalf("error %q: line %d, want 1..%d", e.Error(), e.Line, lines)
			}
		}
	})
}

// TestYAMLSyntaxErrorLines: every class of syntax error the YAML library
// reports is put on the line holding the mistake. The library names the
// line where the enclosing map or list starts, 0-based, for parser errors
// (an indentation error on line 71 came out as line 2) and the line before
// for others; each case fails that way without the recovery.
func TestYAMLSyntaxErrorLines(t *testing.T) {
	// head is 70 valid lines: descriptors start on line 2, the last
	// descriptor's rate_limit map on line 69.
	var head strings.Builder
	head.WriteString("domain: d\ndescriptors:\n")
	for i := 0; i < 22; i++ {
		fmt.Fprintf(&head, "  - key: k%d\n    rate_limit:\n      unit: second\n", i)
	}
	head.WriteString("  - key: last\n    rate_limit:\n")
	if n := strings.Count(head.String(), "\n"); n != 70 {
		t.Fatalf("head has %d lines, want 70", n)
	}
	tests := []struct {
		name string
		tail string // from line 71
		line int
		msg  string
	}{
		{"key indented less than its map", "      unit: second\n     requests_per_unit: 5\n", 72, "did not find expected key"},
		{"key indented between levels", "      unit: second\n   bad: 1\n", 72, "did not find expected '-' indicator"},
		{"list item under a map", "      unit: second\n      - x\n", 72, "did not find expected key"},
		{"tab indentation", "      unit: second\n\tbad: 1\n", 72, "found a tab character that violates indentation"},
		{"unclosed flow list", "      unit: [second\n  - key: z\n", 71, "did not find expected ',' or ']'"},
		{"unclosed flow map", "      unit: {a: 1\n\n  - key: z\n", 71, "did not find expected ',' or '}'"},
		{"unterminated double quote", "      unit: \"second\n  - key: z\n", 71, "found unexpected end of stream"},
		{"unterminated single quote", "      unit: 'second\n", 71, "found unexpected end of stream"},
		{"mapping value in a plain scalar", "      unit: a: b\n", 71, "mapping values are not allowed in this context"},
		{"reserved character", "      unit: @second\n", 71, "found character that cannot start any token"},
		{"empty alias", "      unit: *\n", 71, "did not find expected alphabetic or numeric character"},
		{"unknown escape", "      unit: \"\\q\"\n", 71, "found unknown escape character"},
		{"unclosed verbatim tag", "      unit: !<x second\n", 71, "did not find the expected '>'"},
		{"block scalar indentation", "      unit: |\n    x\n    y: 1\n", 72, "could not find expected ':'"},
		// After the first document (ignored by default, as the reference
		// reads only the first; strict mode names them).
		{"text after document end", "      unit: second\n...\nfoo\n", 73, "did not find expected <document start>"},
		{"in the second document", "      unit: second\n---\ndomain: e\ndescriptors:\n  - key: a\n - key: b\n", 76, "did not find expected key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, crlf := range []bool{false, true} {
				data := head.String() + tt.tail
				if crlf {
					data = strings.ReplaceAll(data, "\n", "\r\n")
				}
				_, err := parse("f.yaml", []byte(data), ReadOptions{Strict: true})
				want := fmt.Sprintf("f.yaml:%d: bad YAML: %s", tt.line, tt.msg)
				if strings.Contains(tt.tail, "\n---\n") || strings.Contains(tt.tail, "\n...\n") {
					want = fmt.Sprintf("f.yaml:%d: a second YAML document starts here (bad YAML: %s)", tt.line, tt.msg)
					if err != nil && strings.HasPrefix(err.Error(), want) {
						continue
					}
				}
				if err == nil || err.Error() != want {
					t.Errorf("crlf %v: Parse = %v, want %s", crlf, err, want)
				}
			}
		})
	}
	// On the first lines, where the library gives no line at all.
	for _, tt := range []struct {
		data string
		want string
	}{
		{"{a: 1\n", "f.yaml:1: bad YAML: did not find expected ',' or '}'"},
		{"- a\nb: c\n", "f.yaml:2: bad YAML: did not find expected '-' indicator"},
		{"a: 1\n  b: 2\n", "f.yaml:2: bad YAML: mapping values are not allowed in this context"},
	} {
		_, err := Parse("f.yaml", []byte(tt.data))
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q) = %v, want %s", tt.data, err, tt.want)
		}
	}
}

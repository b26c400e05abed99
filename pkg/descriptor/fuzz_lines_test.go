package descriptor

import (
	"bytes"
	"errors"
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

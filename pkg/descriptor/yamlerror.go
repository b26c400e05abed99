package descriptor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// This file turns the YAML library's syntax errors into Errors with the
// line they are about.

// decodeSafely decodes the next document, turning a panic inside the YAML
// library into an error: bad input must never crash a reload.
func decodeSafely(dec *yaml.Decoder, doc *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: %v", r)
		}
	}()
	return dec.Decode(doc)
}

var (
	yamlLine      = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)
	unknownAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)
)

// yamlError records a syntax error from the YAML library with the line it
// is about.
//
// The library's line is often wrong: for a parser error it names the
// 0-based line where the enclosing map or list starts, not the line of the
// token it could not accept (an indentation mistake on line 71 of a file
// whose descriptors start on line 2 says "line 2"). So the line is found
// instead as the first line at which the file's beginning fails with the
// very same error (problemLine). Errors from the library's reader (a
// control character, invalid UTF-8) carry no line: the first such byte's
// line is used. An alias to an unknown anchor carries none either: the
// first line holding that alias is used.
func (p *parser) yamlError(err error, data []byte) {
	full := err.Error()
	msg := strings.TrimPrefix(full, "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(full); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = full[len(m[0]):]
	}
	switch m := unknownAnchor.FindStringSubmatch(msg); {
	case m != nil:
		if i := bytes.Index(data, []byte("*"+m[1])); i >= 0 {
			line = 1 + bytes.Count(data[:i], []byte("\n"))
		}
	case isReaderError(msg):
		line = lineWithoutMark(msg, data)
	default:
		if l := problemLine(data, full); l > 0 {
			line = l
		} else if line == 0 {
			line = 1
		}
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Reason: "bad YAML: " + msg})
}

// isReaderError reports whether msg is an error of the library's reader,
// which refuses bytes before any parsing and gives no line.
func isReaderError(msg string) bool {
	return strings.Contains(msg, "control characters") || strings.Contains(msg, "UTF-8") || strings.Contains(msg, "Unicode")
}

// maxRecoverBytes is the largest file whose syntax errors problemLine
// places: it parses the file O(log lines) times, about 7 s for an 800 KB
// file on a busy 2-core machine. A larger file keeps the library's line.
const maxRecoverBytes = 1 << 20

// problemLine returns the first line L such that the file's lines 1..L
// fail to parse with exactly the error full, or 0 when none does (or the
// file is over maxRecoverBytes). The
// parser reads one token at a time and fails on the first it cannot
// accept, so the lines before that token parse (or fail differently) and
// every prefix holding it fails the same way: a binary search over line
// ends finds it with O(log lines) parses.
func problemLine(data []byte, full string) int {
	if len(data) > maxRecoverBytes {
		return 0
	}
	ends := lineEnds(data)
	lo, hi := 0, len(ends)-1 // ends[hi] is the whole file
	if firstError(data[:ends[hi]]) != full {
		return 0
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if firstError(data[:ends[mid]]) == full {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo + 1
}

// lineEnds returns the offset just past each line of data (its line
// break included), the last one being len(data). A break is LF, CRLF or a
// lone CR.
func lineEnds(data []byte) []int {
	var ends []int
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '\n':
			ends = append(ends, i+1)
		case '\r':
			if i+1 < len(data) && data[i+1] == '\n' {
				continue
			}
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	return ends
}

// firstError returns the text of the first error decoding data's YAML
// stream gives, or "" when it decodes.
func firstError(data []byte) string {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := decodeSafely(dec, &doc)
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return err.Error()
		}
	}
}

// lineWithoutMark returns the line of a YAML error whose message names
// none. The library omits the line of errors on the first line, and gives
// none for bytes its reader refuses (a control character, invalid UTF-8):
// for those the first such byte's line is returned, for the others 1.
func lineWithoutMark(msg string, data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		ok := r != utf8.RuneError || n > 1
		switch {
		case r == '\t', r == '\n', r == '\r', r == 0x85:
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0, r >= 0xd800 && r < 0xe000, r == 0xfffe, r == 0xffff:
			ok = false
		}
		if !ok {
			return 1 + bytes.Count(data[:i], []byte("\n"))
		}
		i += n
	}
	return 1
}

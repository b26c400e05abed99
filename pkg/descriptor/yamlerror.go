package descriptor

import (
	"bytes"
	"fmt"
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
// names. The library gives no line for an alias to an unknown anchor; the
// first line holding that alias is used.
func (p *parser) yamlError(err error, data []byte) {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
		if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
			if i := bytes.Index(data, []byte("*"+m[1])); i >= 0 {
				line = 1 + bytes.Count(data[:i], []byte("\n"))
			}
		} else {
			line = lineWithoutMark(msg, data)
		}
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Reason: "bad YAML: " + msg})
}

// lineWithoutMark returns the line of a YAML error whose message names
// none. The library omits the line of errors on the first line, and gives
// none for bytes its reader refuses (a control character, invalid UTF-8):
// for those the first such byte's line is returned, for the others 1.
func lineWithoutMark(msg string, data []byte) int {
	if !strings.Contains(msg, "control characters") && !strings.Contains(msg, "UTF-8") && !strings.Contains(msg, "Unicode") {
		return 1
	}
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

package descriptor

import (
	"strconv"
	"strings"
)

// Error is one configuration error: where it is and what is wrong.
type Error struct {
	// File is the file (or the name given to Parse) holding the error.
	File string
	// Line is the 1-based line of the offending YAML node, or 0 when the
	// error has no line (an unreadable file, a cross-file conflict reported
	// on the file as a whole).
	Line int
	// Path names the value at fault inside File when the source has no
	// lines (a config resource rather than a file), e.g.
	// "descriptors[2].rate_limit.unit"; "" otherwise.
	Path string
	// Reason says what is wrong, in words an operator can act on.
	Reason string
}

// Error returns "file:line: reason", "file: path: reason" for a source
// without lines, or "file: reason".
func (e *Error) Error() string {
	switch {
	case e.Line > 0:
		return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Reason
	case e.Path != "":
		return e.File + ": " + e.Path + ": " + e.Reason
	}
	return e.File + ": " + e.Reason
}

// ErrorList is every error found while reading configuration, in the order
// found (file by file, top to bottom within a file). Load and Parse return
// it as their error, never an empty one.
type ErrorList []*Error

// Error joins the errors with newlines.
func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// err returns l as an error, or nil when l is empty, so that a nil ErrorList
// never becomes a non-nil error.
func (l ErrorList) err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

package config

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	hjson "github.com/hjson/hjson-go/v4"
)

// Python's json.dump writes a float nan or inf as an unquoted NaN, Infinity
// or -Infinity, which is not JSON. Hjson reads such a value as the start
// of a quoteless string running to the end of its line: alone on its line
// it is the string "NaN" (or "NaN,"), which the field's own check reports
// (FieldError adds the hint); with a "}" after it on the line the brace is
// swallowed and the parser reports a missing closing brace far from the
// value. When the parse fails, decodeRaw looks for these values and names
// them instead.

// nonFiniteToken is an unquoted value taken for a non-finite number.
var nonFiniteToken = regexp.MustCompile(`^[+-]?(?i:nan|inf|infinity)$`)

// jsonNumber and jsonKeyword are the other unquoted values that, like a
// number, end at a ',', '}' or ']' rather than at the end of the line.
var jsonNumber = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$`)

func jsonKeyword(tok []byte) bool {
	s := string(tok)
	return s == "true" || s == "false" || s == "null" || jsonNumber.MatchString(s)
}

// nonFiniteMark starts the quoted string that stands in for an unquoted
// non-finite value when the document is read again; the value's index
// follows.
const nonFiniteMark = "\x00deepgo-nonfinite:"

// span is a value's byte range in a document.
type span struct{ start, end int }

// nonFiniteValues returns the values of an Hjson document written as an
// unquoted NaN, Infinity or -Infinity (any case, inf too), in document
// order. It skips strings, comments and keys, and quoteless strings to the
// end of their line, as the Hjson parser does.
func nonFiniteValues(b []byte) []span {
	var spans []span
	var open []bool // the containers open, true for an array
	inArray := func() bool { return len(open) > 0 && open[len(open)-1] }
	wantValue, root := true, true
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
			continue
		case c == '#' || c == '/' && i+1 < len(b) && b[i+1] == '/':
			i = lineEnd(b, i)
			continue
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			j := bytes.Index(b[i+2:], []byte("*/"))
			if j < 0 {
				return spans
			}
			i += j + 4
			continue
		}
		startsRoot := root
		root = false
		switch c {
		case '{', '[':
			open = append(open, c == '[')
			wantValue = c == '['
			i++
		case '}', ']':
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
			wantValue = inArray()
			i++
		case ',':
			wantValue = inArray()
			i++
		case ':':
			wantValue = true
			i++
		case '"', '\'':
			i = stringEnd(b, i)
			if wantValue { // a value ends; a key waits for its ':'
				wantValue = inArray()
			}
		default:
			if startsRoot { // a root without braces is an object
				wantValue = false
			}
			if !wantValue { // a quoteless key runs to its ':'
				j := bytes.IndexByte(b[i:], ':')
				if j < 0 {
					return spans
				}
				i += j
				continue
			}
			end := valueEnd(b, i)
			tok := bytes.TrimRight(b[i:end], " \t")
			switch {
			case nonFiniteToken.Match(tok):
				spans = append(spans, span{i, i + len(tok)})
				i = end
			case jsonKeyword(tok):
				i = end
			default: // a quoteless string
				i = lineEnd(b, i)
			}
			wantValue = inArray()
		}
	}
	return spans
}

// lineEnd is the index of the end of the line holding b[i].
func lineEnd(b []byte, i int) int {
	if j := bytes.IndexAny(b[i:], "\r\n"); j >= 0 {
		return i + j
	}
	return len(b)
}

// valueEnd is where an unquoted value starting at b[i] ends, if it is a
// number: at the end of the line, a ',', '}' or ']', or a comment.
func valueEnd(b []byte, i int) int {
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '\r', '\n', ',', '}', ']', '#':
			return j
		case '/':
			if j+1 < len(b) && (b[j+1] == '/' || b[j+1] == '*') {
				return j
			}
		}
	}
	return len(b)
}

// stringEnd is the index just past the string starting at b[i]: quoted
// with double or single quotes, or Hjson's multiline string in three single
// quotes.
func stringEnd(b []byte, i int) int {
	if bytes.HasPrefix(b[i:], []byte("'''")) {
		if j := bytes.Index(b[i+3:], []byte("'''")); j >= 0 {
			return i + 3 + j + 3
		}
		return len(b)
	}
	q := b[i]
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case q:
			return j + 1
		}
	}
	return len(b)
}

// nonFiniteErrors names, by JSON path, each value of b written as an
// unquoted NaN or Infinity. It returns nil when b holds none, or when b
// does not parse even with them quoted (its syntax error is then the one
// to report).
func nonFiniteErrors(b []byte) error {
	spans := nonFiniteValues(b)
	if len(spans) == 0 {
		return nil
	}
	var doc bytes.Buffer
	at := 0
	for k, s := range spans {
		doc.Write(b[at:s.start])
		fmt.Fprintf(&doc, `"\u0000%s%d"`, nonFiniteMark[1:], k) // nonFiniteMark, k as a JSON string
		at = s.end
	}
	doc.Write(b[at:])
	var v any
	if err := hjson.UnmarshalWithOptions(doc.Bytes(), &v, hjson.DecoderOptions{UseJSONNumber: true, DisallowDuplicateKeys: true}); err != nil {
		return nil
	}
	paths := map[int]string{}
	markPaths("", v, paths)
	if len(paths) == 0 {
		return nil
	}
	idx := make([]int, 0, len(paths))
	for k := range paths {
		idx = append(idx, k)
	}
	sort.Ints(idx)
	var es Errors
	for _, k := range idx {
		s := spans[k]
		es = append(es, &FieldError{Path: paths[k], Value: string(b[s.start:s.end]) + " (unquoted)",
			Allowed: "a finite number, e.g. 0.001, or no key for the default",
			Msg:     "NaN and Infinity are not JSON numbers, though Python's json.dump writes them; quoted, they are strings"})
	}
	return es
}

// markPaths records the JSON path of each nonFiniteMark string in v by its
// index.
func markPaths(path string, v any, out map[int]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			markPaths(p, e, out)
		}
	case []any:
		for i, e := range x {
			markPaths(fmt.Sprintf("%s[%d]", path, i), e, out)
		}
	case string:
		if rest, ok := strings.CutPrefix(x, nonFiniteMark); ok {
			if k, err := strconv.Atoi(rest); err == nil {
				out[k] = path
			}
		}
	}
}

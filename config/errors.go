package config

import (
	"fmt"
	"regexp"
	"strings"
)

// nonFiniteString is a string value that is an unquoted NaN or Infinity as
// Hjson reads one alone on its line (with the comma JSON puts after it).
var nonFiniteString = regexp.MustCompile(`^"[+-]?(?i:nan|inf|infinity),?"$`)

// FieldError is one problem with one value of a config document. It names the
// JSON path of the value (dotted, e.g. "zero_optimization.offload_param.device"),
// the value found, and what is allowed there.
type FieldError struct {
	// Path is the dotted JSON path of the offending key ("" for the whole document).
	Path string
	// Value is the value found, rendered as JSON-ish text ("<absent>" when missing).
	Value string
	// Allowed says what would be accepted instead.
	Allowed string
	// Msg is an optional extra explanation.
	Msg string
}

// Error implements error.
func (e *FieldError) Error() string {
	var b strings.Builder
	p := e.Path
	if p == "" {
		p = "(document)"
	}
	b.WriteString(p)
	if e.Value != "" {
		fmt.Fprintf(&b, ": got %s", e.Value)
	}
	if e.Allowed != "" {
		fmt.Fprintf(&b, "; allowed: %s", e.Allowed)
	}
	if e.Msg != "" {
		fmt.Fprintf(&b, " (%s)", e.Msg)
	} else if nonFiniteString.MatchString(e.Value) {
		b.WriteString(" (an unquoted NaN or Infinity reads as this string: they are not JSON numbers, though Python's json.dump writes them)")
	}
	return b.String()
}

// Errors collects every FieldError found in one document. It is the error type
// returned by Parse, Load and Resolve for bad input; use errors.As to get it.
type Errors []*FieldError

// Error implements error, listing every problem on its own line.
func (es Errors) Error() string {
	if len(es) == 1 {
		return "config: " + es[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config: %d errors:", len(es))
	for _, e := range es {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the individual errors so errors.As can find a *FieldError.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// SyntaxError reports text that is not Hjson (and therefore not JSON). It is
// the counterpart of the exception DeepSpeed's hjson loader raises.
type SyntaxError struct {
	// Msg is the parser's message, including line and column.
	Msg string
}

// Error implements error.
func (e *SyntaxError) Error() string { return "config: syntax: " + e.Msg }

// DuplicateKeyError reports a key that appears twice in one object. DeepSpeed
// rejects such files with ValueError("Duplicate keys in DeepSpeed config: [...]").
type DuplicateKeyError struct {
	// Key is the duplicated key name.
	Key string
	// Where is the parser's position text (line and column).
	Where string
}

// Error implements error.
func (e *DuplicateKeyError) Error() string {
	s := fmt.Sprintf("config: Duplicate keys in DeepSpeed config: ['%s']", e.Key)
	if e.Where != "" {
		s += " (" + e.Where + ")"
	}
	return s + "; allowed: each key at most once per object"
}

// Warning is a non-fatal remark about a config: a deprecated key that was
// mapped, an unknown key, an "auto" that was resolved or could not be, a
// conflict between two keys. The library never prints warnings.
type Warning struct {
	// Path is the dotted JSON path the warning is about.
	Path string
	// Msg says what happened and what deepgo did about it.
	Msg string
}

// String renders the warning as "path: msg".
func (w Warning) String() string {
	if w.Path == "" {
		return w.Msg
	}
	return w.Path + ": " + w.Msg
}

package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	hjson "github.com/hjson/hjson-go/v4"
)

// Option changes how Parse and Load read a document.
type Option func(*options)

type options struct {
	strict bool
	world  int
	hidden int
}

// WithStrict makes every warning about an unknown key or an unresolved "auto"
// an error (DeepSpeed itself rejects unknown keys inside its checked sections).
func WithStrict(strict bool) Option { return func(o *options) { o.strict = strict } }

// WithWorld tells Parse the total number of ranks, so that the batch triad is
// resolved (Resolve(world, 0, 0, 0)) and sizes that must divide the world are
// checked while loading.
func WithWorld(n int) Option { return func(o *options) { o.world = n } }

// WithModelHidden gives the model's hidden size, used to resolve "auto" ZeRO
// bucket sizes the way HF Transformers does (h², 0.9·h², 10·h).
func WithModelHidden(n int) Option { return func(o *options) { o.hidden = n } }

// Load reads the config file at path the way DeepSpeed reads a config file
// path (Hjson, duplicate keys rejected) and returns it resolved and validated.
// Errors are *SyntaxError, *DuplicateKeyError or Errors (every problem found;
// also, when the text does not parse, every value written as an unquoted NaN
// or Infinity that made it so, with no *Config).
func Load(path string, opts ...Option) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(b, opts...)
}

// Parse reads a config document (Hjson, a superset of JSON) and returns it
// resolved and validated. On validation errors it returns the partially
// resolved *Config together with an Errors value listing every problem, so
// callers can still show warnings; on syntax or duplicate-key errors the
// *Config is nil.
func Parse(b []byte, opts ...Option) (cfg *Config, err error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	raw, err := decodeRaw(b)
	if err != nil {
		return nil, err
	}
	return build(raw, o)
}

// Validate checks c as Parse checks a document, for a *Config about to be
// trained on. A *Config that Parse returned together with Errors fails with
// those Errors: its bad values were replaced by defaults (a stage of 4
// would train at stage 0). Otherwise c's current values, including any a
// program set in Go after loading, are read back the way Parse read the
// file (c.JSON() through Parse with the same options: world size, model
// hidden size, strict; "auto" keys left to Resolve), and the errors name
// each bad value's JSON path as Parse's do. Warnings do not fail it.
// deepgo.Initialize calls it.
func (c *Config) Validate() error {
	if len(c.parseErrs) > 0 {
		return c.parseErrs
	}
	b, err := c.JSON()
	if err != nil {
		return fmt.Errorf("config: a value set in Go has no JSON form (NaN or an infinity?): %w", err)
	}
	_, err = Parse(b, func(o *options) { *o = c.parseOpts })
	return err
}

// decodeRaw parses Hjson text into a tree of map[string]any, []any, string,
// bool, nil, int64 and float64, with hjson-py's number typing.
func decodeRaw(b []byte) (out map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &SyntaxError{Msg: fmt.Sprint("parser failure: ", r)}
		}
	}()
	// A UTF-8 byte-order mark is skipped, as hjson-py skips it (DeepSpeed
	// loads such a file); hjson-go would read it as the start of a
	// quoteless string.
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	var v any
	opts := hjson.DecoderOptions{UseJSONNumber: true, DisallowDuplicateKeys: true}
	if err := hjson.UnmarshalWithOptions(b, &v, opts); err != nil {
		// an unquoted NaN or Infinity with a '}' after it on its line
		// swallowed the brace: name it rather than the brace Hjson
		// misses. One that parses (alone on its line) is a string, which
		// the field's own check reports.
		if nf := nonFiniteErrors(b); nf != nil {
			return nil, nf
		}
		msg := err.Error()
		if key, where, ok := duplicateKey(msg); ok {
			return nil, &DuplicateKeyError{Key: key, Where: where}
		}
		return nil, &SyntaxError{Msg: msg}
	}
	m, ok := normalize(v).(map[string]any)
	if !ok {
		return nil, &SyntaxError{Msg: fmt.Sprintf("the document must be an object, got %s", render(normalize(v)))}
	}
	return m, nil
}

var lineRe = regexp.MustCompile(`' (at line \d+,\d+) >>> `)

// duplicateKey extracts the key from hjson-go's duplicate-key message:
// "Found duplicate values (...) for key 'K'[ at line L,C >>> ...]".
func duplicateKey(msg string) (key, where string, ok bool) {
	if !strings.HasPrefix(msg, "Found duplicate values") {
		return "", "", false
	}
	i := strings.LastIndex(msg, "for key '")
	if i < 0 {
		return "", "", false
	}
	rest := msg[i+len("for key '"):]
	if loc := lineRe.FindStringSubmatchIndex(rest); loc != nil {
		return rest[:loc[0]], rest[loc[2]:loc[3]], true
	}
	return strings.TrimSuffix(rest, "'"), "", true
}

// normalize converts json.Number leaves to int64/float64 following hjson-py:
// a literal with a fraction or exponent becomes an int when its value is
// integral and below 1e10 in magnitude.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	case json.Number:
		return parseNumber(string(x))
	}
	return v
}

func parseNumber(s string) any {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !isRangeErr(err) {
		return s
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e10 {
		return int64(f)
	}
	return f
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// render writes a raw value as short JSON-like text for messages.
func render(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		s := strconv.Quote(x)
		if len(s) > 60 {
			s = s[:57] + `..."`
		}
		return s
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case map[string]any:
		return "an object"
	case []any:
		b, err := json.Marshal(x)
		if err != nil || len(b) > 60 {
			return fmt.Sprintf("an array of %d", len(x))
		}
		return string(b)
	}
	return fmt.Sprint(v)
}
